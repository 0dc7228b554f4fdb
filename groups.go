package raidq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// Consumer groups (DESIGN §8, the "generations" of seed 003).
//
// The live members of a group share a topic's partitions: every member
// heartbeats in the groups bucket every GroupInterval, lists the members
// whose heartbeat is younger than meta.GroupTTL, and owns the partitions
// for which its id has the highest rendezvous hash of
// group/topic/partition/member. A member that takes a partition claims its
// position entry (compare-and-set on the KV revision), which fences the
// previous owner: that owner's next Commit fails with ErrFenced and its
// reader stops. Reading starts from the committed position, or from
// ConsumerOptions.From when the group has none (zero From = the topic's
// creation, i.e. earliest).
//
// Delivery is at-least-once: whatever the previous owner delivered after
// its last commit is delivered again to the new owner after a rebalance or
// a crash. Within one owner's reading, records are deduplicated by stripe
// id like any consumer's; across owners, dedupe on Message.Stripe plus the
// record's index (Message.Position.Index) if duplicates matter. A crashed
// member's partitions move after meta.GroupTTL plus up to one interval; a
// member that Closes leaves the group and its partitions move within one
// interval.

// GroupInterval is how often a group member heartbeats and recomputes its
// partitions.
const GroupInterval = 2 * time.Second

// ErrFenced: the partition was claimed by another member of the group since
// this member read it (a rebalance, or this member was presumed dead); the
// commit did not happen and the partition's reader is stopped here.
var ErrFenced = meta.ErrFenced

// ErrSeeked: Commit of a message delivered before a Seek of its partition;
// nothing is committed.
var ErrSeeked = errors.New("message was delivered before the last Seek")

// gens numbers partition claims and seeks process-wide, so a Message can
// say which reading of its partition delivered it.
var gens atomic.Uint64

// groupState is a group consumer's membership and owned partitions.
type groupState struct {
	c      *Consumer
	store  *meta.Store
	group  string
	member string
	from   time.Time // zero: earliest
	auto   time.Duration

	mu      sync.Mutex
	parts   map[int]*groupPart
	backoff map[int]time.Time // fenced partitions not reclaimed before
	stopped bool
	crashed bool
	quit    chan struct{}
	done    chan struct{}

	// With AutoCommit the sinks hand messages to the forwarder (in), which
	// alone sends on the channel and remembers what it sent and the
	// application has not yet taken (queue).
	in      chan handoff
	fwdDone chan struct{}
	hmu     sync.Mutex
	queue   []handoff
}

// groupPart is one owned partition: its reader and the claim's revision.
type groupPart struct {
	p        int
	claimGen uint64 // gen when claimed
	gen      uint64 // gen of the current reader (changes on Seek)
	quit     chan struct{}
	reader   *actors.Reader

	mu        sync.Mutex // serializes commits
	rev       uint64
	committed core.Position // next position, as committed (or claimed)
	seeked    bool          // a Seek allows commits below committed

	processed core.Position // AutoCommit: after the last message done (guarded by groupState.hmu)
}

type handoff struct {
	part *groupPart
	next core.Position
	m    Message
}

func newMemberID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "m-" + hex.EncodeToString(b[:])
}

// groupConsumer starts a consumer in opts.Group.
func (c *Client) groupConsumer(t *actors.Topic, opts ConsumerOptions) (*Consumer, error) {
	if opts.Partitions != nil {
		return nil, fmt.Errorf("consumer group %q: Partitions cannot be set, the group assigns them", opts.Group)
	}
	if err := bus.ValidName("group", opts.Group); err != nil {
		return nil, err
	}
	if opts.Member == "" {
		opts.Member = newMemberID()
	}
	if err := bus.ValidName("member", opts.Member); err != nil {
		return nil, err
	}
	store := opts.Meta
	if store == nil {
		store = c.meta
	}
	if store == nil {
		return nil, fmt.Errorf("consumer group %q: no metadata store (connect without WithCatalog, or set ConsumerOptions.Meta)", opts.Group)
	}
	cons := &Consumer{c: c, topic: t.Name, opts: opts, ch: make(chan Message, opts.Buffer), quit: make(chan struct{})}
	g := &groupState{c: cons, store: store, group: opts.Group, member: opts.Member, from: opts.From, auto: opts.AutoCommit,
		parts: make(map[int]*groupPart), backoff: make(map[int]time.Time), quit: make(chan struct{}), done: make(chan struct{})}
	cons.group = g
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := store.GroupHeartbeat(ctx, g.group, t.Name, g.member, time.Now()); err != nil {
		return nil, fmt.Errorf("consumer group %q: join: %w", g.group, err)
	}
	if g.auto > 0 {
		g.in, g.fwdDone = make(chan handoff), make(chan struct{})
		go g.forward()
	}
	go g.run()
	return cons, nil
}

func (g *groupState) log() []any {
	return []any{"group", g.group, "topic", g.c.topic, "member", g.member}
}

func (g *groupState) run() {
	defer close(g.done)
	t := time.NewTicker(GroupInterval)
	defer t.Stop()
	var auto <-chan time.Time
	if g.auto > 0 {
		at := time.NewTicker(g.auto)
		defer at.Stop()
		auto = at.C
	}
	for {
		g.rebalance()
		select {
		case <-g.quit:
			return
		case <-t.C:
		case <-auto:
			g.autoCommit(false)
			continue
		}
	}
}

// ctx bounds one round of metadata calls.
func (g *groupState) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), GroupInterval*2)
}

// rebalance heartbeats, lists the live members and moves partitions.
func (g *groupState) rebalance() {
	ctx, cancel := g.ctx()
	defer cancel()
	now := time.Now()
	log := g.c.c.logger
	if err := g.store.GroupHeartbeat(ctx, g.group, g.c.topic, g.member, now); err != nil {
		log.Warn("consumer group heartbeat failed", append(g.log(), "err", err)...)
	}
	members, err := g.store.GroupMembers(ctx, g.group, g.c.topic, now)
	if err != nil {
		log.Warn("consumer group: listing members failed; keeping the current partitions", append(g.log(), "err", err)...)
		return
	}
	t, err := g.c.c.core.Catalog().Topic(g.c.topic)
	if err != nil {
		log.Warn("consumer group: topic gone; keeping the current partitions", append(g.log(), "err", err)...)
		return
	}
	want := make(map[int]bool)
	for _, p := range assign(g.group, g.c.topic, t.Partitions, withMember(members, g.member), g.member) {
		want[p] = true
	}
	var revoke, keep []*groupPart
	var claim []int
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	for p, part := range g.parts {
		if want[p] {
			keep = append(keep, part)
		} else {
			revoke = append(revoke, part)
		}
	}
	for p := range want {
		if _, ok := g.parts[p]; !ok && now.After(g.backoff[p]) {
			claim = append(claim, p)
		}
	}
	g.mu.Unlock()
	sort.Ints(claim)
	for _, part := range revoke {
		g.drop(part, false)
		if g.auto > 0 {
			g.commitProcessed(ctx, part)
		}
		log.Info("consumer group: partition moved to another member", append(g.log(), "partition", part.p)...)
	}
	for _, part := range keep {
		// A member with a stale view may have claimed it: stop at once
		// rather than at the next commit.
		pos, _, err := g.store.Position(ctx, g.group, g.c.topic, part.p)
		if err == nil && pos.Member != g.member {
			g.drop(part, true)
			log.Info("consumer group: partition claimed by another member", append(g.log(), "partition", part.p, "by", pos.Member)...)
		}
	}
	for _, p := range claim {
		if err := g.claim(ctx, p); err != nil {
			log.Warn("consumer group: claiming partition failed; retrying next round", append(g.log(), "partition", p, "err", err)...)
		}
	}
}

func withMember(members []string, me string) []string {
	for _, m := range members {
		if m == me {
			return members
		}
	}
	return append(members, me)
}

// assign returns the partitions member owns among members: those for
// which it has the highest rendezvous hash (ties to the smaller id).
func assign(group, topic string, partitions int, members []string, member string) []int {
	var out []int
	for p := 0; p < partitions; p++ {
		best, bestScore := "", uint64(0)
		for _, m := range members {
			h := fnv.New64a()
			fmt.Fprintf(h, "%s/%s/%d/%s", group, topic, p, m)
			s := h.Sum64()
			if best == "" || s > bestScore || (s == bestScore && m < best) {
				best, bestScore = m, s
			}
		}
		if best == member {
			out = append(out, p)
		}
	}
	return out
}

// claim takes partition p: it rewrites the group's position entry as this
// member's (fencing the previous owner) and starts reading from it.
func (g *groupState) claim(ctx context.Context, p int) error {
	var pos meta.GroupPosition
	var rev uint64
	var err error
	for try := 0; try < 3; try++ {
		pos, rev, err = g.store.ClaimPosition(ctx, g.group, g.c.topic, p, g.member, time.Now())
		if !errors.Is(err, meta.ErrFenced) {
			break
		}
	}
	if err != nil {
		return err
	}
	from := core.Position{Offset: pos.Offset, Index: pos.Index}
	committed := from
	if pos.Offset == 0 && !g.from.IsZero() {
		from = core.Position{Offset: uint64(g.from.UnixNano())}
	}
	gen := gens.Add(1)
	part := &groupPart{p: p, claimGen: gen, gen: gen, quit: make(chan struct{}), rev: rev, committed: committed, processed: committed}
	if err := g.startReader(part, from); err != nil {
		return err
	}
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		g.stopPart(part)
		return nil
	}
	g.parts[p] = part
	g.mu.Unlock()
	g.c.c.logger.Info("consumer group: partition claimed", append(g.log(), "partition", p, "from", from.String(), "previous_owner", pos.Member)...)
	return nil
}

func (g *groupState) startReader(part *groupPart, from core.Position) error {
	r, err := g.c.c.core.NewReader(actors.ReaderConfig{Topic: g.c.topic, Partition: part.p, From: from,
		Sink: g.sink(part), OnReport: g.c.report(part.p)})
	if err != nil {
		return err
	}
	part.reader = r
	return nil
}

// sink forwards a partition's deliveries to the channel (through the
// forwarder with AutoCommit) until the partition is dropped or the
// consumer closes.
func (g *groupState) sink(part *groupPart) func([]core.Delivery) {
	c := g.c
	return func(ds []core.Delivery) {
		c.sendMu.RLock()
		defer c.sendMu.RUnlock()
		for _, d := range ds {
			m := recordMessage(c.topic, part.p, d.Record)
			m.Position, m.Stripe, m.gen = d.Pos, d.Stripe, part.gen
			select {
			case <-part.quit:
				return
			case <-c.quit:
				return
			default:
			}
			if g.auto > 0 {
				h := handoff{part: part, next: core.Position{Offset: d.Pos.Offset, Index: d.Pos.Index + 1}, m: m}
				select {
				case g.in <- h:
				case <-part.quit:
					return
				case <-c.quit:
					return
				}
				continue
			}
			select {
			case c.ch <- m:
			case <-part.quit:
				return
			case <-c.quit:
				return
			}
		}
	}
}

// forward is the only sender on the channel with AutoCommit, so it knows
// the channel's order: it remembers each message it hands over, and the
// channel's length then tells how many the application has taken.
func (g *groupState) forward() {
	defer close(g.fwdDone)
	c := g.c
	for {
		var h handoff
		select {
		case h = <-g.in:
		case <-c.quit:
			return
		}
		c.sendMu.RLock()
		select {
		case c.ch <- h.m:
		case <-c.quit:
			c.sendMu.RUnlock()
			return
		}
		c.sendMu.RUnlock()
		h.m = Message{}
		g.hmu.Lock()
		g.queue = append(g.queue, h)
		g.foldLocked(false)
		g.hmu.Unlock()
	}
}

// foldLocked marks as processed the messages the application has taken
// from the channel, except the last one taken, which it may still be
// working on (all of them if all is set: Close). The channel holds the
// last len(ch) messages of the queue (or one more, sent but not queued
// yet, which only makes the count smaller).
func (g *groupState) foldLocked(all bool) {
	taken := len(g.queue) - len(g.c.ch)
	done := taken - 1
	if all {
		done = taken
	}
	if done <= 0 {
		return
	}
	for _, h := range g.queue[:done] {
		h.part.processed = h.next
	}
	clear(g.queue[:done])
	g.queue = g.queue[done:]
}

// autoCommit commits every owned partition's processed position.
func (g *groupState) autoCommit(all bool) {
	g.hmu.Lock()
	g.foldLocked(all)
	g.hmu.Unlock()
	g.mu.Lock()
	parts := make([]*groupPart, 0, len(g.parts))
	for _, part := range g.parts {
		parts = append(parts, part)
	}
	g.mu.Unlock()
	ctx, cancel := g.ctx()
	defer cancel()
	for _, part := range parts {
		g.commitProcessed(ctx, part)
	}
}

func (g *groupState) commitProcessed(ctx context.Context, part *groupPart) {
	g.hmu.Lock()
	pos := part.processed
	g.hmu.Unlock()
	if err := g.commit(ctx, part, pos); err != nil && !errors.Is(err, meta.ErrFenced) {
		g.c.c.logger.Warn("consumer group: auto-commit failed", append(g.log(), "partition", part.p, "err", err)...)
	}
}

// commit writes next as part's position unless it would move backwards.
// Fenced, the partition is dropped.
func (g *groupState) commit(ctx context.Context, part *groupPart, next core.Position) error {
	part.mu.Lock()
	if !part.committed.Less(next) && !part.seeked {
		part.mu.Unlock()
		return nil
	}
	rev, err := g.store.CommitPosition(ctx, g.group, g.c.topic, part.p,
		meta.GroupPosition{Offset: next.Offset, Index: next.Index, Member: g.member, Updated: time.Now().UnixNano()}, part.rev)
	if err == nil {
		part.rev, part.committed, part.seeked = rev, next, false
	}
	part.mu.Unlock()
	if errors.Is(err, meta.ErrFenced) {
		g.drop(part, true)
		return fmt.Errorf("consumer group %s member %s: partition %d was taken over by another member, its reader is stopped here: %w",
			g.group, g.member, part.p, err)
	}
	return err
}

// drop stops reading part and forgets it; fenced partitions are not
// reclaimed for two intervals, so members with briefly different views
// of the group do not take a partition back and forth.
func (g *groupState) drop(part *groupPart, fenced bool) {
	g.mu.Lock()
	if g.parts[part.p] == part {
		delete(g.parts, part.p)
		if fenced {
			g.backoff[part.p] = time.Now().Add(2 * GroupInterval)
		}
	}
	g.mu.Unlock()
	g.stopPart(part)
}

func (g *groupState) stopPart(part *groupPart) {
	select {
	case <-part.quit:
	default:
		close(part.quit)
	}
	if part.reader != nil {
		part.reader.Close()
	}
}

// Commit records that m and everything before it in its partition are
// processed: the group resumes after m when the partition moves to another
// member. It never moves a partition's position backwards (committing an
// older message is a no-op), except after Seek. If the partition was taken
// over by another member, the commit fails with an error wrapping ErrFenced
// and this member stops reading the partition; the new owner redelivers
// what was not committed (at-least-once).
func (c *Consumer) Commit(ctx context.Context, m Message) error {
	g := c.group
	if g == nil {
		return errors.New("raidq: Commit needs a consumer group (ConsumerOptions.Group)")
	}
	if m.Topic != c.topic || m.gen == 0 {
		return fmt.Errorf("raidq: Commit of a message this consumer did not deliver (topic %q, partition %d)", m.Topic, m.Partition)
	}
	g.mu.Lock()
	part := g.parts[m.Partition]
	g.mu.Unlock()
	if part == nil || m.gen < part.claimGen {
		return fmt.Errorf("consumer group %s member %s: partition %d is no longer this member's (rebalanced): %w",
			g.group, g.member, m.Partition, meta.ErrFenced)
	}
	if m.gen < part.gen {
		return fmt.Errorf("consumer group %s partition %d: %w", g.group, m.Partition, ErrSeeked)
	}
	return g.commit(ctx, part, core.Position{Offset: m.Position.Offset, Index: m.Position.Index + 1})
}

// Partitions lists the partitions this consumer reads now (for a group
// member: those it owns, which change on rebalances).
func (c *Consumer) Partitions() []int {
	if c.group == nil {
		return append([]int(nil), c.opts.Partitions...)
	}
	c.group.mu.Lock()
	defer c.group.mu.Unlock()
	out := make([]int, 0, len(c.group.parts))
	for p := range c.group.parts {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// Member is this consumer's member id in its group ("" without a group).
func (c *Consumer) Member() string {
	if c.group == nil {
		return ""
	}
	return c.group.member
}

// seek restarts every owned partition's reader at t; the next commits may
// move positions backwards. Partitions claimed later start from the
// group's committed positions.
func (g *groupState) seek(t time.Time) error {
	g.mu.Lock()
	parts := make([]*groupPart, 0, len(g.parts))
	for _, part := range g.parts {
		parts = append(parts, part)
	}
	g.mu.Unlock()
	var errs []error
	for _, old := range parts {
		g.stopPart(old)
		old.mu.Lock()
		part := &groupPart{p: old.p, claimGen: old.claimGen, gen: gens.Add(1), quit: make(chan struct{}),
			rev: old.rev, committed: old.committed, seeked: true, processed: core.Position{Offset: uint64(t.UnixNano())}}
		old.mu.Unlock()
		if err := g.startReader(part, core.Position{Offset: uint64(t.UnixNano())}); err != nil {
			errs = append(errs, err)
			g.mu.Lock()
			if g.parts[old.p] == old {
				delete(g.parts, old.p)
			}
			g.mu.Unlock()
			continue
		}
		g.mu.Lock()
		if g.parts[old.p] == old && !g.stopped {
			g.parts[old.p] = part
			g.mu.Unlock()
			continue
		}
		g.mu.Unlock()
		g.stopPart(part) // dropped meanwhile
	}
	return errors.Join(errs...)
}

// stop ends membership. Gracefully (crash false) it stops the readers,
// commits what the application took (AutoCommit) and leaves the group so
// the others take over at once; a crash (tests) just stops everything, as
// if the process died, keeping the stale claims for Commit to find fenced.
func (g *groupState) stop(crash bool) {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.stopped, g.crashed = true, crash
	close(g.quit)
	parts := make([]*groupPart, 0, len(g.parts))
	for _, part := range g.parts {
		parts = append(parts, part)
	}
	g.mu.Unlock()
	<-g.done
	for _, part := range parts {
		g.stopPart(part)
	}
	if crash {
		return
	}
	if g.auto > 0 {
		g.autoCommit(true)
	}
	// The claims stay: Commit after Close works until another member
	// claims the partition (then it fails with ErrFenced).
	ctx, cancel := g.ctx()
	defer cancel()
	if err := g.store.LeaveGroup(ctx, g.group, g.c.topic, g.member); err != nil {
		g.c.c.logger.Warn("consumer group: leaving failed; the others take over after the heartbeat expires", append(g.log(), "err", err)...)
	}
}

// crash stops a group member as if its process died: no commit, no
// LeaveGroup; its claims stay for Commit to find fenced (tests).
func (c *Consumer) crash() {
	if c.group != nil {
		c.group.stop(true)
	}
}
