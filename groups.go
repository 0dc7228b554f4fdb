package raidq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/drillhooks"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// Consumer groups (docs/design.md#consumers-groups-and-fencing, the generations of seed 003; the policy is
// core.PlanGroup and core.Liveness, this file carries it out).
//
// The live members of a group share a topic's partitions by rendezvous
// hashing. Every GroupInterval a member writes its heartbeat record, lists
// the others' records and the partitions' position records, and plans:
//
//   - Liveness is judged on this member's own monotonic clock from the
//     other records' revisions (core.Liveness); a metadata stall judges
//     nobody dead. Only a listing known to be current is observed: one
//     showing this round's heartbeat (freshListing), nothing older than
//     already seen; an owner a position record names that the listing
//     left out is read by its key (confirmOwners).
//   - Revoke before assign: a partition assigned here is claimed only once
//     its record is released, names this member, or names a member judged
//     dead. A partition assigned elsewhere is given up at once: its reader
//     stops, messages of it still buffered are dropped, the member waits
//     (up to revokeGrace) for the application to finish the one it holds,
//     commits (AutoCommit) and releases the record in one compare-and-set.
//   - A claim rewrites the record as this member's: the previous owner, if
//     it was only presumed dead, finds itself fenced at its next round or
//     commit and stops.
//   - A member that has not heartbeaten for core.PauseAfter(session)
//     pauses delivery until it can: by then the others may judge it dead.
//
// Commits never pass the partition reader's lowest unresolved in-doubt
// offset (actors.Reader.LowWater), so a member that takes a partition over
// re-reads anything the previous owner could not yet decode.
//
// Delivery is at-least-once across failures: what a crashed member
// delivered after its last commit is delivered again by its successor.
// Without failures (joins, leaves, Close) a partition moves without
// redelivery when the application commits or uses AutoCommit.

// GroupInterval is how often a group member heartbeats and rebalances.
const GroupInterval = time.Second

// revokeGrace bounds the wait, when a partition moves away, for the
// application to finish the message of it that it holds.
const revokeGrace = 3 * time.Second

// gens numbers partition claims and seeks process-wide, so a Message can
// say which reading of its partition delivered it.
var gens atomic.Uint64

// groupState is a group consumer's membership and owned partitions.
type groupState struct {
	c       *Consumer
	store   meta.GroupKV
	group   string
	member  string
	from    time.Time // zero: earliest
	auto    time.Duration
	session time.Duration
	// base is the context of every metadata call of the membership: it
	// ends, with the *PermissionError as its cause, when the cluster
	// refuses the group's keys (refusals.go), so no call waits out its
	// timeout on a refusal; unwatch ends that watch.
	base    context.Context
	unwatch func()
	// bugs re-creates fixed mistakes for the simulation's bug-catching
	// tests (drillhooks.GroupPorts.Bugs); zero for every real client.
	bugs drillhooks.GroupBugs

	// Owned by the loop goroutine (run).
	epoch     time.Time // the core's clock: monotonic ns since epoch
	live      *core.Liveness
	trouble   string // the state last logged, so each change is logged once
	topicGone int
	lastBeat  time.Time // when the last heartbeat that succeeded was sent (bugs.RoundPause only)
	ownRev    uint64    // the highest revision of this member's record a member listing showed

	mu       sync.Mutex
	parts    map[int]*groupPart
	releases map[int]*groupPart // given up, record not yet released
	stopped  bool
	quit     chan struct{}
	done     chan struct{}

	pmu        sync.Mutex
	resume     chan struct{} // closed while delivering; open while paused
	pauseTimer *time.Timer   // pauses delivery PauseAfter(session) after the last heartbeat

	hmu     sync.Mutex
	offered *groupPart    // the partition of a message being handed over now
	inHand  *handoff      // the message the application holds
	handCh  chan struct{} // closed (and renewed) when inHand changes
}

// groupPart is one owned partition: its reader and the claim's revision.
type groupPart struct {
	p        int
	claimGen uint64 // gen when claimed
	gen      uint64 // gen of the current reader (changes on Seek)
	quit     chan struct{}
	reader   partReader
	from     core.Position // where reader started (Consumer.Lag)

	mu        sync.Mutex // serializes commits
	rev       uint64
	committed core.Position // next position, as committed (or claimed)
	seeked    bool          // a Seek allows commits below committed

	processed core.Position // after the last message done (guarded by groupState.hmu)
}

type handoff struct {
	part *groupPart
	next core.Position
}

func newMemberID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "m-" + hex.EncodeToString(b[:])
}

// groupConsumer starts a consumer in opts.Group.
func (c *Client) groupConsumer(t *meta.Topic, opts consumerConfig) (*Consumer, error) {
	if err := groupOptions(&opts); err != nil {
		return nil, err
	}
	store := c.meta
	if err := kafkaNameFree(c.logger, store, opts.Group); err != nil {
		return nil, err
	}
	base, refuse := context.WithCancelCause(context.Background())
	unwatch := c.refusals.watch(c.refusals.groupSubjects(t.Name, opts.Group), func(pe *PermissionError) { refuse(pe) })
	return startGroup(c, clientPorts(c), store, t.Name, opts, base, unwatch, drillhooks.GroupBugs{})
}

// groupOptions checks a group consumer's options and fills in the
// defaults (a fresh member id, the default session).
func groupOptions(opts *consumerConfig) error {
	if opts.Partitions != nil {
		return fmt.Errorf("consumer group %q: Partitions cannot be set, the group assigns them", opts.Group)
	}
	if err := bus.ValidName("group", opts.Group); err != nil {
		return err
	}
	if opts.Member == "" {
		opts.Member = newMemberID()
	}
	if err := bus.ValidName("member", opts.Member); err != nil {
		return err
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = meta.GroupTTL
	}
	if opts.SessionTimeout < 3*GroupInterval || opts.SessionTimeout > meta.MaxSession {
		return fmt.Errorf("consumer group %q: session timeout %v: must be %v..%v", opts.Group, opts.SessionTimeout,
			3*GroupInterval, meta.MaxSession)
	}
	return nil
}

// startGroup joins the group and starts the member's loop: a client's
// consumer (c, its ports and store) or the simulation's (c nil, simulated
// ports; hooks.go). base is the context of every metadata call; unwatch
// ends the refusals watch that cancels it.
func startGroup(c *Client, ports consumerPorts, store meta.GroupKV, topic string, opts consumerConfig, base context.Context,
	unwatch func(), bugs drillhooks.GroupBugs) (*Consumer, error) {
	g := &groupState{store: store, group: opts.Group, member: opts.Member, from: opts.From, auto: opts.AutoCommit,
		session: opts.SessionTimeout, epoch: time.Now(), parts: make(map[int]*groupPart), releases: make(map[int]*groupPart),
		quit: make(chan struct{}), done: make(chan struct{}), resume: make(chan struct{}), handCh: make(chan struct{}),
		base: base, unwatch: unwatch, bugs: bugs}
	close(g.resume)
	g.live = core.NewLiveness(g.now())
	// Join: a refusal (permissions) fails here, clearly; a metadata stall
	// does not: the member retries in its loop.
	ctx, cancel := context.WithTimeout(g.base, GroupInterval*3)
	err := store.GroupHeartbeat(ctx, g.group, topic, g.member, time.Now(), g.session)
	cancel()
	if err != nil {
		err = g.refusal(err)
	}
	if err != nil && refused(err) {
		g.unwatch()
		return nil, fmt.Errorf("consumer group %q: join: %w", g.group, err)
	}
	if err != nil {
		ports.logger.Warn("consumer group: first heartbeat failed; retrying", "group", g.group, "topic", topic,
			"member", g.member, "err", err)
	}
	cons := newConsumer(c, ports, topic, opts)
	g.c = cons
	cons.group = g
	g.armPause(time.Now()) // a session starts at the join either way
	go g.run()
	return cons, nil
}

// kafkaNameFree refuses a group name a Kafka group holds. A check that
// cannot be made (a metadata stall) lets the member start, as its first
// heartbeat does.
func kafkaNameFree(logger *slog.Logger, store meta.GroupKV, group string) error {
	ctx, cancel := context.WithTimeout(context.Background(), GroupInterval*3)
	defer cancel()
	taken, err := store.KafkaGroupExists(ctx, group)
	switch {
	case taken:
		return fmt.Errorf("consumer group %q: %w", group, ErrKafkaGroup)
	case err != nil && refused(err):
		return fmt.Errorf("consumer group %q: join: %w", group, err)
	case err != nil:
		logger.Warn("consumer group: could not check the name against Kafka groups; starting", "group", group, "err", err)
	}
	return nil
}

// refusal is err, or the refusal of the group's keys that ended the call.
func (g *groupState) refusal(err error) error {
	var pe *PermissionError
	if errors.As(context.Cause(g.base), &pe) {
		return pe
	}
	return err
}

// refused: the cluster said no (permissions), as opposed to not answering.
func refused(err error) bool {
	return errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) ||
		strings.Contains(err.Error(), "Permissions Violation")
}

func (g *groupState) now() int64 { return time.Since(g.epoch).Nanoseconds() }

func (g *groupState) logArgs(kv ...any) []any {
	return append([]any{"group", g.group, "topic", g.c.topic, "member", g.member}, kv...)
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
		g.round()
		// Ticks that came during the round are taken in a fixed order
		// (quit, AutoCommit, the round's), not Go's random one, so the
		// simulation replays the member.
		select {
		case <-g.quit:
			return
		default:
		}
		select {
		case <-auto:
			g.commitAll()
			continue
		default:
		}
		select {
		case <-g.quit:
			return
		case <-t.C:
		case <-auto:
			g.commitAll()
			continue
		}
	}
}

// setTrouble logs a change of the member's trouble state once ("" = fine).
func (g *groupState) setTrouble(state string, err error) {
	if state == g.trouble {
		return
	}
	log := g.c.ports.logger
	switch {
	case state == "":
		log.Info("consumer group: metadata reachable again", g.logArgs("was", g.trouble)...)
	default:
		log.Warn("consumer group: "+state+"; retrying, keeping the partitions held", g.logArgs("err", err)...)
	}
	g.trouble = state
}

// round heartbeats, lists the members and positions, and moves partitions.
func (g *groupState) round() {
	ctx, cancel := context.WithTimeout(g.base, 2*GroupInterval)
	sent := time.Now()
	err := g.store.GroupHeartbeat(ctx, g.group, g.c.topic, g.member, sent, g.session)
	cancel()
	if err != nil {
		err = g.refusal(err)
	}
	beat := err == nil
	if beat {
		// From when it was sent: the others may have seen it from then on.
		g.armPause(sent)
		g.lastBeat = sent
	} else if refused(err) {
		g.c.fail(fmt.Errorf("consumer group %s: heartbeat refused: %w", g.group, err))
		return
	} else {
		g.setTrouble("heartbeat failed", err)
	}
	if g.bugs.RoundPause && time.Since(g.lastBeat) > time.Duration(core.PauseAfter(int64(g.session))) {
		g.pause() // the bug: the pause is checked at rounds only
	}
	ctx, cancel = context.WithTimeout(g.base, 3*GroupInterval)
	defer cancel()
	beats, err := g.store.GroupBeats(ctx, g.group, g.c.topic)
	if err != nil {
		g.live.Failed(g.now())
		g.setTrouble("listing members failed", err)
		return
	}
	if !g.freshListing(beats, beat) && !g.bugs.TrustStaleListings {
		if beat {
			g.setTrouble("member listing answered from an old state", errStaleListing)
		}
		return
	}
	if g.bugs.SkipConfirmMissing {
		// the bug: a member missing from the listing is taken for gone
	} else if err := g.confirmMissing(ctx, beats); err != nil {
		g.live.Failed(g.now())
		g.setTrouble("reading a member's record failed", err)
		return
	}
	obs := make(map[string]core.MemberBeat, len(beats))
	for m, b := range beats {
		obs[m] = core.MemberBeat{Revision: b.Revision, Session: int64(b.Session)}
	}
	if !g.bugs.TrustStaleListings && g.live.Behind(obs) {
		g.setTrouble("member listing answered from an old state", errStaleListing)
		return
	}
	g.live.Observe(g.now(), obs)
	owners, err := g.store.GroupPositions(ctx, g.group, g.c.topic)
	if err != nil {
		g.setTrouble("listing positions failed", err)
		return
	}
	if g.bugs.SkipOwnerRead || g.bugs.SkipConfirmMissing {
		// the bug: an owner missing from the listing is taken for gone
	} else if err := g.confirmOwners(ctx, obs, owners); err != nil {
		g.live.Failed(g.now())
		g.setTrouble("reading a member's record failed", err)
		return
	}
	if !g.topicStill() {
		return
	}
	t, _ := g.c.ports.catalog.Topic(g.c.topic)
	g.apply(ctx, t.Partitions, owners)
	if beat && g.reassert(ctx) {
		g.unpause()
		g.setTrouble("", nil)
	}
}

// confirmMissing reads by key the record of every member judged live that
// the listing left out, and adds those still there to beats: a key listing
// is a watch that may end before it delivered a key updated meanwhile, and
// a live member taken for gone has its partitions claimed while it still
// reads them (both deliver). A member that left has no record and stays out.
func (g *groupState) confirmMissing(ctx context.Context, beats map[string]meta.MemberBeat) error {
	for _, m := range g.live.Live(g.now()) {
		if _, ok := beats[m]; ok || m == g.member {
			continue
		}
		b, ok, err := g.store.GroupBeat(ctx, g.group, g.c.topic, m)
		if err != nil {
			return err
		}
		if ok {
			g.c.ports.logger.Info("consumer group: a live member was missing from the member listing; its record is there",
				g.logArgs("missing", m)...)
			beats[m] = b
		}
	}
	return nil
}

// errStaleListing: a member listing older than this member's heartbeat.
var errStaleListing = errors.New("a member listing did not show this member's last heartbeat, or showed a record older than already seen")

// freshListing reports whether a member listing is known to be answered
// from the KV as it is now, not from an older state (a replica behind, a
// former leader resuming): this round's heartbeat succeeded and the
// listing shows this member's record at a revision higher than any
// listing showed before. Only such a listing is observed and planned on:
// one answered from an old state shows a live member's heartbeat as it
// was then, and taken as current it runs that member's session out while
// it heartbeats. Skipping the others (without counting their time out,
// as a failed listing's is) keeps sessions timed: the next fresh listing
// still shows whether the revision moved meanwhile.
func (g *groupState) freshListing(beats map[string]meta.MemberBeat, beat bool) bool {
	own, ok := beats[g.member]
	fresh := beat && ok && own.Revision > g.ownRev
	if ok {
		g.ownRev = max(g.ownRev, own.Revision)
	}
	return fresh
}

// confirmOwners reads by key the record of every member a position
// record names that the member listing left out, and observes those
// still there: this member may never have seen them (its first listing
// missed them, confirmMissing only re-reads members it already judges
// live), and an owner never seen counts as dead, so its partition would be
// claimed while it reads it.
func (g *groupState) confirmOwners(ctx context.Context, obs map[string]core.MemberBeat, owners map[int]meta.PositionEntry) error {
	var missing []string
	for _, e := range owners {
		if m := e.Pos.Member; m != "" && m != g.member && !slices.Contains(missing, m) {
			if _, ok := obs[m]; !ok {
				missing = append(missing, m)
			}
		}
	}
	slices.Sort(missing)
	found := false
	for _, m := range missing {
		b, ok, err := g.store.GroupBeat(ctx, g.group, g.c.topic, m)
		if err != nil {
			return err
		}
		if ok {
			g.c.ports.logger.Info("consumer group: a position record's owner was missing from the member listing; its record is there",
				g.logArgs("missing", m)...)
			obs[m] = core.MemberBeat{Revision: b.Revision, Session: int64(b.Session)}
			found = true
		}
	}
	if found {
		g.live.Observe(g.now(), obs)
	}
	return nil
}

// reassert, for a paused member whose heartbeat just succeeded, rewrites
// every held record as its own before delivery resumes: another member
// may have judged it dead from a listing taken before that heartbeat and
// be claiming right now. Whichever compare-and-set lands first wins; a
// lost one drops the partition here. False: a write failed otherwise, so
// the member stays paused until the next round.
func (g *groupState) reassert(ctx context.Context) bool {
	if !g.paused() || g.bugs.ResumeBlind {
		return true
	}
	g.mu.Lock()
	held := make([]*groupPart, 0, len(g.parts))
	for _, part := range g.parts {
		held = append(held, part)
	}
	g.mu.Unlock()
	ok := true
	for _, part := range held {
		part.mu.Lock()
		rec := meta.GroupPosition{Offset: part.committed.Offset, Index: part.committed.Index, Member: g.member,
			Updated: time.Now().UnixNano()}
		rev, err := g.writePosition(ctx, part, rec)
		if err == nil {
			part.rev = rev
		}
		part.mu.Unlock()
		switch {
		case errors.Is(err, meta.ErrFenced):
			g.drop(part)
			g.c.ports.logger.Info("consumer group: partition taken by another member while paused; stopped here",
				g.logArgs("partition", part.p)...)
		case err != nil:
			ok = false
		}
	}
	return ok
}

// topicStill counts rounds without the topic; after topicGoneChecks the
// consumer ends (the topic was deleted).
func (g *groupState) topicStill() bool {
	if _, err := g.c.ports.catalog.Topic(g.c.topic); !errors.Is(err, ErrUnknownTopic) {
		g.topicGone = 0
		return err == nil
	}
	g.topicGone++
	if g.topicGone >= topicGoneChecks {
		g.c.fail(fmt.Errorf("consumer group %s: topic %s was deleted: %w", g.group, g.c.topic, ErrUnknownTopic))
	}
	return false
}

// apply carries out core.PlanGroup for this round.
func (g *groupState) apply(ctx context.Context, partitions int, owners map[int]meta.PositionEntry) {
	v := core.GroupView{Group: g.group, Topic: g.c.topic, Partitions: partitions, Me: g.member,
		Live: g.live.Live(g.now()), Owners: make(map[int]string), Held: make(map[int]bool),
		Revs: make(map[int]uint64), HeldRevs: make(map[int]uint64), Releasing: make(map[int]bool)}
	for p, e := range owners {
		v.Owners[p], v.Revs[p] = e.Pos.Member, e.Rev
	}
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	held := make([]*groupPart, 0, len(g.parts))
	for p, part := range g.parts {
		v.Held[p] = true
		held = append(held, part)
	}
	pending := make([]*groupPart, 0, len(g.releases))
	for p, part := range g.releases {
		pending = append(pending, part)
		v.Releasing[p] = true
	}
	g.mu.Unlock()
	for _, part := range held {
		part.mu.Lock()
		if e, ok := owners[part.p]; ok && e.Rev > part.rev && e.Pos.Member == g.member {
			part.rev = e.Rev // a write of this member whose answer was lost
		}
		v.HeldRevs[part.p] = part.rev
		part.mu.Unlock()
	}
	if g.bugs.StaleHold {
		v.HeldRevs = nil // the bug: fenced only on another owner's name
	}
	plan := core.PlanGroup(v)
	if g.bugs.ClaimEarly {
		plan.Claim = append(plan.Claim, plan.Wait...) // the bug: no revoke before assign
	}
	if g.bugs.KeepOrphans {
		plan.Orphans = nil
	}
	log := g.c.ports.logger
	for _, p := range plan.Fenced {
		if part := g.held(p); part != nil {
			g.drop(part)
			log.Info("consumer group: partition claimed by another member; stopped here", g.logArgs("partition", p, "by", v.Owners[p])...)
		}
	}
	for _, p := range plan.Release {
		if part := g.held(p); part != nil {
			g.release(ctx, part)
		}
	}
	for _, part := range pending {
		g.finishRelease(ctx, part)
	}
	for _, p := range plan.Claim {
		if err := g.claim(ctx, p, owners[p]); err != nil && !errors.Is(err, meta.ErrFenced) {
			g.setTrouble("claiming a partition failed", err)
		}
	}
	for _, p := range plan.Orphans {
		e := owners[p]
		rec := e.Pos
		rec.Member, rec.Updated = "", time.Now().UnixNano()
		if _, err := g.store.CommitPosition(ctx, g.group, g.c.topic, p, rec, e.Rev); err == nil {
			log.Info("consumer group: released a record naming this member that it did not hold", g.logArgs("partition", p)...)
		}
	}
}

// armPause (re)arms the pause that follows a heartbeat sent at sent if
// no later one succeeds: at core.PauseAfter(session), exactly, not at the
// next round (a round may take several seconds while the metadata hangs).
func (g *groupState) armPause(sent time.Time) {
	if g.bugs.RoundPause {
		return
	}
	d := time.Duration(core.PauseAfter(int64(g.session))) - time.Since(sent)
	g.pmu.Lock()
	defer g.pmu.Unlock()
	select {
	case <-g.quit:
		return // stopped: no more pauses
	default:
	}
	if g.pauseTimer == nil {
		g.pauseTimer = time.AfterFunc(max(d, 0), g.pause)
		return
	}
	g.pauseTimer.Reset(max(d, 0))
}

func (g *groupState) held(p int) *groupPart {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.parts[p]
}

// claim takes partition p, free per the plan: it rewrites the record as
// this member's (fencing a presumed-dead owner) and starts reading from
// the committed position.
func (g *groupState) claim(ctx context.Context, p int, e meta.PositionEntry) error {
	pos := e.Pos
	prev := pos.Member
	pos.Member, pos.Updated = g.member, time.Now().UnixNano()
	rev, err := g.store.CommitPosition(ctx, g.group, g.c.topic, p, pos, e.Rev)
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
	delete(g.releases, p)
	g.mu.Unlock()
	g.c.ports.logger.Info("consumer group: partition claimed", g.logArgs("partition", p, "from", from.String(), "previous_owner", prev)...)
	return nil
}

// startReader starts part's reader at from. A partition taken over from
// another member starts with an empty dedupe memory at the committed
// position: no warm-up learns the stripe ids before it, since one that
// did dropped records the previous owner had not delivered (a stripe in
// doubt to it at its first copy comes at its retry copy, and the commit
// can fall between the two; docs/design.md, a436bf7).
func (g *groupState) startReader(part *groupPart, from core.Position) error {
	r, err := g.c.ports.newReader(actors.ReaderConfig{Topic: g.c.topic, Partition: part.p, From: from,
		Sink: g.sink(part), OnReport: g.c.report(part.p)})
	if err != nil {
		return err
	}
	part.reader, part.from = r, from
	return nil
}

// sink forwards a partition's deliveries to the buffer until the
// partition is dropped or the consumer closes; it waits while paused.
func (g *groupState) sink(part *groupPart) func([]core.Delivery) {
	c := g.c
	return func(ds []core.Delivery) {
		for _, d := range ds {
			m := deliveryMessage(c.topic, part.p, d)
			m.gen = part.gen
			select {
			case <-g.gate():
			case <-part.quit:
				return
			case <-c.quit:
				return
			}
			select {
			case c.buf <- m:
			case <-part.quit:
				return
			case <-c.quit:
				return
			}
		}
	}
}

// release gives part up: stop reading, wait for the application to finish
// the message of it that it holds, commit and release the record.
func (g *groupState) release(ctx context.Context, part *groupPart) {
	g.mu.Lock()
	if g.parts[part.p] == part {
		delete(g.parts, part.p)
		g.releases[part.p] = part
	}
	g.mu.Unlock()
	g.stopPart(part)
	g.waitInHand(part)
	// A fresh bound: the wait may have used up most of the round's.
	ctx, cancel := context.WithTimeout(g.base, 2*GroupInterval)
	defer cancel()
	g.finishRelease(ctx, part)
}

// finishRelease writes part's final position with no owner; a failed
// write is retried next round (the partition stays unread meanwhile).
func (g *groupState) finishRelease(ctx context.Context, part *groupPart) {
	part.mu.Lock()
	pos := maxPos(part.committed, g.safe(part, g.processedOf(part)))
	rev, err := g.writePosition(ctx, part, meta.GroupPosition{Offset: pos.Offset, Index: pos.Index, Updated: time.Now().UnixNano()})
	if err == nil {
		part.rev, part.committed = rev, pos
	}
	part.mu.Unlock()
	if err != nil && !errors.Is(err, meta.ErrFenced) {
		g.setTrouble("releasing a partition failed", err)
		return
	}
	g.mu.Lock()
	if g.releases[part.p] == part {
		delete(g.releases, part.p)
	}
	g.mu.Unlock()
	g.c.ports.logger.Info("consumer group: partition released to another member", g.logArgs("partition", part.p, "at", pos.String())...)
}

// drop stops reading part without committing (fenced).
func (g *groupState) drop(part *groupPart) {
	g.mu.Lock()
	if g.parts[part.p] == part {
		delete(g.parts, part.p)
	}
	g.mu.Unlock()
	g.stopPart(part)
}

func (g *groupState) stopPart(part *groupPart) {
	if !part.given() {
		close(part.quit)
	}
	if part.reader != nil {
		part.reader.Close()
	}
}

// safe caps a position at the reader's lowest unresolved in-doubt offset.
func (g *groupState) safe(part *groupPart, pos core.Position) core.Position {
	if part.reader == nil || g.bugs.CommitPastLowWater {
		return pos
	}
	if low := part.reader.LowWater(); low.Less(pos) {
		return low
	}
	return pos
}

func maxPos(a, b core.Position) core.Position {
	if a.Less(b) {
		return b
	}
	return a
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

// stop ends membership. Gracefully (crash false) it stops the readers,
// commits what the application took (AutoCommit), releases the partitions
// and leaves the group so the others take over at once; a crash (tests)
// just stops everything, as if the process died, keeping the stale claims
// for Commit to find fenced.
func (g *groupState) stop(crash bool) {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.stopped = true
	close(g.quit)
	g.pmu.Lock()
	if g.pauseTimer != nil {
		g.pauseTimer.Stop()
	}
	g.pmu.Unlock()
	parts := make([]*groupPart, 0, len(g.parts)+len(g.releases))
	for _, part := range g.parts {
		parts = append(parts, part)
	}
	for _, part := range g.releases {
		parts = append(parts, part)
	}
	g.mu.Unlock()
	<-g.done
	for _, part := range parts {
		g.stopPart(part)
	}
	defer g.unwatch()
	if crash {
		return
	}
	g.idle() // the application is done with what it took
	ctx, cancel := context.WithTimeout(g.base, 5*time.Second)
	defer cancel()
	for _, part := range parts {
		g.finishRelease(ctx, part)
	}
	if err := g.store.LeaveGroup(ctx, g.group, g.c.topic, g.member); err != nil {
		g.c.ports.logger.Warn("consumer group: leaving failed; the others take over after the session times out",
			g.logArgs("err", err)...)
	}
}

// crash stops a group member as if its process died: no commit, no
// LeaveGroup; its claims stay for Commit to find fenced (tests).
func (c *Consumer) crash() {
	if c.group != nil {
		c.group.stop(true)
	}
}

// kill ends a group consumer as a killed process ends: no commit, no
// release, no leave (its claims stay for the others to find fenced), its
// readers and forwarder stopped, Messages closed (drillhooks.GroupConsumer's
// crash).
func (c *Consumer) kill() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.crash()
	c.mu.Lock()
	close(c.quit)
	c.mu.Unlock()
	<-c.fwdDone
	c.stopReaders()
	c.unlag()
	c.unwatch()
}
