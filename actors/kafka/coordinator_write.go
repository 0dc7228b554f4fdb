package kafka

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// One group held by the coordinator, and how its record is written: one
// write in flight at a time, the latest state and offsets each time. The
// OffsetCommits that arrive while a write is in flight wait for the next
// one, which takes them all: many commits of a group cost one write.

// kgroup is one group's entry. ready closes once its record is loaded
// (loadErr: it could not be); everything below mu is guarded by it.
type kgroup struct {
	name    string
	ready   chan struct{}
	loadErr error

	mu         sync.Mutex
	core       *core.KafkaGroup
	native     bool                                  // a native raidq group holds the name: refused
	offsets    map[string]map[int32]meta.KafkaOffset // as the next write has them
	offsetCost int
	// stored is the offsets of the record at rev, as read or written
	// here (never modified): what OffsetFetch answers, and what a lost
	// compare-and-set's merge compares the re-read record with.
	stored     map[string]map[int32]meta.KafkaOffset
	rev        uint64 // the record's revision as last read or written (0: none)
	writtenGen int32  // the generation of the record at rev
	snap       core.KafkaSnapshot
	seq        uint64        // snap's Persist sequence
	barrier    uint64        // a generation's Persist not yet written (0: none)
	dirty      bool          // snap or offsets not written
	unwritten  map[tp]bool   // commits taken and not yet written
	inflight   map[tp]bool   // ... being written now
	commits    []*commitWait // OffsetCommits waiting for the next write
	flight     []*commitWait // ... for the write in flight
	waiters    map[uint64]chan reply
	writing    bool
	fenced     bool  // a compare-and-set was lost: re-read before writing
	lastWrite  int64 // when the last write started
	retryAt    int64
	backoff    time.Duration
	trouble    string // the write trouble last logged ("": none)
	leaving    bool   // no longer coordinated here (or closing): flush, drop
	leftAt     int64
	lastUsed   int64
	deleting   chan error // DeleteGroups waits for the writer on it
	deleteDone bool
}

type tp struct {
	topic string
	part  int32
}

// commitWait is an OffsetCommit waiting for the write of its offsets:
// each partition is settled with its code (0: written), done closes once
// all are.
type commitWait struct {
	keys  map[tp]meta.KafkaOffset // not yet settled: the offset taken
	codes map[tp]int16
	done  chan struct{}
}

func newCommitWait() *commitWait {
	return &commitWait{keys: map[tp]meta.KafkaOffset{}, codes: map[tp]int16{}, done: make(chan struct{})}
}

func (w *commitWait) settle(k tp, code int16) {
	if _, ok := w.keys[k]; !ok {
		return
	}
	delete(w.keys, k)
	w.codes[k] = code
	if len(w.keys) == 0 {
		close(w.done)
	}
}

// settleCommits settles the partitions of list's commits that only
// selects (nil: all) with code, and returns those still waiting.
func settleCommits(list []*commitWait, code int16, only func(tp) bool) []*commitWait {
	out := list[:0]
	for _, w := range list {
		for k := range w.keys {
			if only == nil || only(k) {
				w.settle(k, code)
			}
		}
		if len(w.keys) > 0 {
			out = append(out, w)
		}
	}
	clear(list[len(out):])
	return out
}

// failCommits settles every waiting commit with code (g.mu held); their
// offsets stay to be written.
func (g *kgroup) failCommits(code int16) {
	g.commits = settleCommits(g.commits, code, nil)
	g.flight = settleCommits(g.flight, code, nil)
}

// reply is a JoinGroup's or SyncGroup's answer, or a code for either.
type reply struct {
	join *core.KafkaJoinReply
	sync *core.KafkaSyncReply
	code core.KafkaCode
}

func newKGroup(name string) *kgroup {
	return &kgroup{name: name, ready: make(chan struct{}), offsets: map[string]map[int32]meta.KafkaOffset{},
		unwritten: map[tp]bool{}, waiters: map[uint64]chan reply{}}
}

// init takes the loaded record (rev 0: none).
func (g *kgroup) init(c *Coordinator, rec meta.KafkaGroup, rev uint64, native bool, now int64) {
	g.native, g.rev, g.writtenGen, g.lastUsed = native, rev, rec.Generation, now
	if rev == 0 {
		g.core = core.NewKafkaGroup(c.core)
	} else {
		g.core = core.LoadKafkaGroup(c.core, snapshotOf(rec), now)
		if !c.cfg.Bugs.TakeoverWithoutOffsets {
			g.setOffsets(rec.Offsets)
			g.stored = rec.Offsets
		}
	}
	g.snap = g.core.Snapshot()
}

func (g *kgroup) setOffsets(offs map[string]map[int32]meta.KafkaOffset) {
	g.offsets, g.offsetCost = map[string]map[int32]meta.KafkaOffset{}, 0
	for topic, parts := range offs {
		g.offsets[topic] = maps.Clone(parts)
		g.offsetCost += meta.KafkaTopicCost(topic)
		for _, o := range parts {
			g.offsetCost += meta.KafkaOffsetCost(o.Metadata)
		}
	}
}

// usable is the code for a request on this entry (g.mu held).
func (g *kgroup) usable() core.KafkaCode {
	switch {
	case g.native:
		return core.KafkaInvalidGroupID
	case g.leaving:
		return core.KafkaCoordinatorLoadInProgress // dropping it; a new load follows
	case g.deleting != nil:
		return core.KafkaCoordinatorNotAvailable
	}
	return core.KafkaNone
}

func (g *kgroup) answer(req uint64, r reply) {
	if ch, ok := g.waiters[req]; ok {
		delete(g.waiters, req)
		ch <- r
	}
}

// answerAll answers every waiting request with code.
func (g *kgroup) answerAll(code core.KafkaCode) {
	for req := range g.waiters {
		g.answer(req, reply{code: code})
	}
}

// leave stops serving the group: it is flushed, then dropped.
func (g *kgroup) leave(now int64, code core.KafkaCode) {
	g.answerAll(code)
	if !g.leaving {
		g.leaving, g.leftAt = true, now
	}
}

// droppable: nothing left to write (or the drain gave up), or idle.
func (g *kgroup) droppable(c *Coordinator, now int64) bool {
	if g.writing || g.deleting != nil {
		return false
	}
	if g.leaving {
		if g.dirty && now-g.leftAt < int64(c.lim.DrainTimeout) {
			return false
		}
		if g.dirty {
			c.log.Warn("kafka groups: dropping a group whose state could not be written", "group", g.name)
		}
		return true
	}
	idle := g.core.Idle() && !g.dirty && len(g.waiters) == 0
	return idle && (g.rev == 0 && !g.native || now-g.lastUsed >= int64(c.lim.IdleDrop))
}

// maybeWrite starts the group's writer if a write is due: a generation or
// a waiting OffsetCommit at once, anything else WriteEvery after the last
// write, and none before a failure's backoff ends (force, for Close: at
// once).
func (c *Coordinator) maybeWrite(g *kgroup, now int64, force bool) {
	due := g.dirty || g.fenced || g.deleting != nil && !g.deleteDone
	if g.writing || !due {
		return
	}
	// A failed write's backoff holds even when forced (Close's drain
	// "waits out backoffs"): forced past it, a KV failing at once (no
	// responders, a process cut off) was written to in a hot loop until
	// DrainTimeout; the simulation's fake clock never got past it
	// (scenarios/sim/kafka_group.go).
	if now < g.retryAt || !force && g.barrier == 0 && g.deleting == nil && len(g.commits) == 0 &&
		now-g.lastWrite < int64(c.lim.WriteEvery) {
		return
	}
	g.writing, g.lastWrite = true, now
	if !c.spawn(func() { c.write(g) }) {
		g.writing = false
	}
}

// write does the group's next KV operation: a delete, a re-read after a
// lost compare-and-set, or a write of the latest state.
func (c *Coordinator) write(g *kgroup) {
	defer func() {
		select {
		case c.wrote <- struct{}{}:
		default:
		}
	}()
	ctx, cancel := context.WithTimeout(c.ctx, c.lim.KVTimeout)
	defer cancel()
	g.mu.Lock()
	switch {
	case g.deleting != nil:
		rev := g.rev
		g.mu.Unlock()
		c.delete(ctx, g, rev)
	case g.fenced:
		g.mu.Unlock()
		rec, rev, err := c.cfg.KV.KafkaGroup(ctx, g.name)
		g.mu.Lock()
		g.writing = false
		if c.failed(g, err) {
			g.mu.Unlock()
			return
		}
		c.reconcile(g, rec, rev)
		c.maybeWrite(g, c.now(), g.leaving)
		g.mu.Unlock()
	default:
		rec, seq := g.record(c.cfg.Wall())
		g.mu.Unlock()
		c.put(ctx, g, rec, seq)
	}
}

// put writes rec (the state of Persist seq) at the entry's revision.
func (c *Coordinator) put(ctx context.Context, g *kgroup, rec *meta.KafkaGroup, seq uint64) {
	g.mu.Lock()
	rev := g.rev
	g.mu.Unlock()
	nrev, err := c.cfg.KV.PutKafkaGroup(ctx, rec, rev)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writing = false
	if errors.Is(err, meta.ErrFenced) {
		c.log.Info("kafka groups: another gateway wrote the group; re-reading it", "group", g.name)
		g.requeue()
		g.fenced = true
		c.maybeWrite(g, c.now(), g.leaving)
		return
	}
	if c.failed(g, err) {
		// Written or not: a reply lost leaves it unknown. The record is
		// re-read before the next write, which tells the commits waiting
		// on this one whether they are in it (reconcile).
		g.requeue()
		g.fenced = true
		return
	}
	g.rev, g.writtenGen, g.inflight, g.stored = nrev, rec.Generation, nil, rec.Offsets
	g.flight = settleCommits(g.flight, 0, nil)
	if g.barrier != 0 && seq >= g.barrier {
		g.barrier = 0
	}
	if !g.leaving {
		c.apply(g, g.core.Persisted(c.now(), seq))
	}
	c.maybeWrite(g, c.now(), false) // a newer generation waiting
}

// requeue puts a failed write's commits back among the unwritten, and
// the OffsetCommits still waiting on it before those waiting for the next.
func (g *kgroup) requeue() {
	for k := range g.inflight {
		g.unwritten[k] = true
	}
	g.inflight, g.dirty = nil, true
	g.commits, g.flight = append(g.flight, g.commits...), nil
}

// failed handles a KV error (nil: none) with backoff, logging a change
// of trouble once; it reports whether there was one.
func (c *Coordinator) failed(g *kgroup, err error) bool {
	if err == nil {
		if g.trouble != "" {
			c.log.Info("kafka groups: writing the group works again", "group", g.name)
		}
		g.trouble, g.backoff = "", 0
		return false
	}
	if g.trouble == "" {
		c.log.Warn("kafka groups: writing the group failed; serving from memory and retrying", "group", g.name, "err", err)
	}
	g.trouble = err.Error()
	g.backoff = min(max(2*g.backoff, c.lim.RetryMin), c.lim.RetryMax)
	g.retryAt = c.now() + int64(g.backoff)
	return true
}

// reconcile takes the record re-read after a lost compare-and-set. If
// another gateway moved the generation past the last one written here,
// it ran a join phase: the group is reloaded from the record and its
// waiting requests told NOT_COORDINATOR. Otherwise (it only wrote
// commits, or the record is gone) the state here is written over it.
//
// The offsets. Every OffsetCommit is acknowledged only once written, so
// every offset the record holds was (or is about to be) acknowledged by
// whoever wrote it, and the commits taken here and not yet written were
// acknowledged to no one. The record's offsets stand; a commit taken here
// goes over the record only if (1) the record's generation has not moved
// past the last one written here (else the commit belongs to a generation
// the group has left, whose partitions another member may own by now: as
// Kafka refuses a commit of an old generation) and (2) the record holds
// for that partition what it held when this gateway last read or wrote
// it (else another gateway acknowledged a commit of it since, which may
// be the newer one: the client that owns the partition is asked to
// commit again). Either way an offset the record holds from a newer
// generation or a later acknowledged write is never overwritten by an
// older one. The commits that lose get NOT_COORDINATOR (clients look the
// coordinator up and commit again); a record that is gone (deleted)
// takes everything held here. An OffsetCommit whose very offsets the
// record holds (a write of this gateway's whose reply was lost) is
// answered as written.
func (c *Coordinator) reconcile(g *kgroup, rec meta.KafkaGroup, rev uint64) {
	adopted := rev != 0 && rec.Generation > g.writtenGen
	if rev != 0 {
		mine, base := g.offsets, g.stored
		g.setOffsets(rec.Offsets)
		g.stored = rec.Offsets
		for _, w := range g.commits {
			for k, o := range w.keys {
				if holds(rec.Offsets, k, o) {
					w.settle(k, 0) // written after all
				}
			}
		}
		g.commits = settleCommits(g.commits, 0, func(tp) bool { return false }) // drops the settled
		lost := map[tp]bool{}
		for k := range g.unwritten {
			o, ok := mine[k.topic][k.part]
			if ok && holds(rec.Offsets, k, o) {
				delete(g.unwritten, k) // written after all
				continue
			}
			if !ok || adopted || !sameOffset(rec.Offsets, base, k) {
				lost[k] = true
				delete(g.unwritten, k)
				continue
			}
			g.putOffset(k, o)
		}
		if len(lost) > 0 {
			c.log.Info("kafka groups: commits lost to another gateway's record; their clients commit again", "group", g.name,
				"partitions", len(lost))
			g.commits = settleCommits(g.commits, int16(core.KafkaNotCoordinator), func(k tp) bool { return lost[k] })
		}
	}
	if adopted {
		c.log.Warn("kafka groups: another gateway ran a newer generation; reloading the group",
			"group", g.name, "generation", rec.Generation, "last_written_here", g.writtenGen)
		g.answerAll(core.KafkaNotCoordinator)
		if g.core.State() != core.KafkaDead {
			g.core = core.LoadKafkaGroup(c.core, snapshotOf(rec), c.now())
		}
		// The new core numbers its persists from 1: a write in flight of
		// the old one's must not pass for one of them.
		g.snap, g.seq, g.barrier = g.core.Snapshot(), 0, 0
		g.writtenGen = rec.Generation
	}
	g.rev, g.fenced = rev, false
	g.dirty = !adopted // adopted as it stands: nothing to write
}

// holds reports whether offs holds o for k.
func holds(offs map[string]map[int32]meta.KafkaOffset, k tp, o meta.KafkaOffset) bool {
	got, ok := offs[k.topic][k.part]
	return ok && got == o
}

// sameOffset reports whether a and b hold the same offset (or none) for k.
func sameOffset(a, b map[string]map[int32]meta.KafkaOffset, k tp) bool {
	oa, inA := a[k.topic][k.part]
	ob, inB := b[k.topic][k.part]
	return inA == inB && oa == ob
}

// putOffset sets one committed offset, keeping the cost.
func (g *kgroup) putOffset(k tp, o meta.KafkaOffset) {
	parts := g.offsets[k.topic]
	if parts == nil {
		parts = map[int32]meta.KafkaOffset{}
		g.offsets[k.topic] = parts
		g.offsetCost += meta.KafkaTopicCost(k.topic)
	}
	if old, ok := parts[k.part]; ok {
		g.offsetCost -= meta.KafkaOffsetCost(old.Metadata)
	}
	parts[k.part] = o
	g.offsetCost += meta.KafkaOffsetCost(o.Metadata)
}

// delete removes the record (DeleteGroups) and the entry.
func (c *Coordinator) delete(ctx context.Context, g *kgroup, rev uint64) {
	var err error
	if rev != 0 {
		err = c.cfg.KV.DeleteKafkaGroup(ctx, g.name, rev)
	}
	g.mu.Lock()
	g.writing, g.deleteDone = false, true
	g.failCommits(int16(core.KafkaCoordinatorNotAvailable))
	g.deleting <- err
	g.mu.Unlock()
	c.forget(g)
}

// record is the group's record as it stands (g.mu held); the unwritten
// commits, and the OffsetCommits waiting for them, move in flight.
func (g *kgroup) record(wall time.Time) (*meta.KafkaGroup, uint64) {
	s := g.snap
	rec := &meta.KafkaGroup{Name: g.name, Generation: s.Generation, State: s.State.String(), ProtocolType: s.ProtocolType,
		Protocol: s.Protocol, Leader: s.Leader, Updated: wall.UnixNano()}
	if s.State == core.KafkaDead {
		rec.State = core.KafkaEmpty.String()
	}
	for _, m := range s.Members {
		rec.Members = append(rec.Members, meta.KafkaMember{ID: m.ID, InstanceID: m.Instance, ClientID: m.ClientID,
			ClientHost: m.ClientHost, Session: meta.Duration(m.Session), Rebalance: meta.Duration(m.Rebalance),
			Metadata: m.Metadata, Assignment: m.Assignment})
	}
	if len(g.offsets) > 0 {
		rec.Offsets = make(map[string]map[int32]meta.KafkaOffset, len(g.offsets))
		for topic, parts := range g.offsets {
			rec.Offsets[topic] = maps.Clone(parts)
		}
	}
	if g.inflight == nil {
		g.inflight = map[tp]bool{}
	}
	for k := range g.unwritten {
		g.inflight[k] = true
	}
	g.unwritten, g.dirty = map[tp]bool{}, false
	g.flight, g.commits = append(g.flight, g.commits...), nil
	return rec, g.seq
}

// snapshotOf is a record's state for the core.
func snapshotOf(rec meta.KafkaGroup) core.KafkaSnapshot {
	st, ok := core.ParseKafkaGroupState(rec.State)
	if !ok {
		st = core.KafkaEmpty
	}
	s := core.KafkaSnapshot{Generation: rec.Generation, State: st, ProtocolType: rec.ProtocolType,
		Protocol: rec.Protocol, Leader: rec.Leader}
	for _, m := range rec.Members {
		s.Members = append(s.Members, core.KafkaMemberState{ID: m.ID, Instance: m.InstanceID, ClientID: m.ClientID,
			ClientHost: m.ClientHost, Session: int64(m.Session), Rebalance: int64(m.Rebalance), Metadata: m.Metadata,
			Assignment: m.Assignment})
	}
	return s
}
