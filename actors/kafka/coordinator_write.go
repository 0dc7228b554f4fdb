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
// write in flight at a time, the latest state and offsets each time.

// kgroup is one group's entry. ready closes once its record is loaded
// (loadErr: it could not be); everything below mu is guarded by it.
type kgroup struct {
	name    string
	ready   chan struct{}
	loadErr error

	mu         sync.Mutex
	core       *core.KafkaGroup
	native     bool // a native raidq group holds the name: refused
	offsets    map[string]map[int32]meta.KafkaOffset
	offsetCost int
	rev        uint64 // the record's revision as last read or written (0: none)
	writtenGen int32  // the generation of the record at rev
	snap       core.KafkaSnapshot
	seq        uint64      // snap's Persist sequence
	barrier    uint64      // a generation's Persist not yet written (0: none)
	dirty      bool        // snap or offsets not written
	unwritten  map[tp]bool // commits acknowledged and not yet written
	inflight   map[tp]bool // ... being written now
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

// maybeWrite starts the group's writer if a write is due: a generation at
// once, anything else WriteEvery after the last write, and neither before
// a failure's backoff ends (force, for Close: at once).
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
	if now < g.retryAt || !force && g.barrier == 0 && g.deleting == nil && now-g.lastWrite < int64(c.lim.WriteEvery) {
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
		g.requeue()
		return
	}
	g.rev, g.writtenGen, g.inflight = nrev, rec.Generation, nil
	if g.barrier != 0 && seq >= g.barrier {
		g.barrier = 0
	}
	if !g.leaving {
		c.apply(g, g.core.Persisted(c.now(), seq))
	}
	c.maybeWrite(g, c.now(), false) // a newer generation waiting
}

// requeue puts a failed write's commits back among the unwritten.
func (g *kgroup) requeue() {
	for k := range g.inflight {
		g.unwritten[k] = true
	}
	g.inflight, g.dirty = nil, true
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

// reconcile takes the record re-read after a lost compare-and-set. The
// stored offsets are kept but for the commits acknowledged here and not
// yet written. If another gateway moved the generation past the last one
// written here, it ran a join phase: the group is reloaded from the
// record and its waiting requests told NOT_COORDINATOR. Otherwise (it
// only wrote commits, or the record is gone) the state here is written
// over it.
func (c *Coordinator) reconcile(g *kgroup, rec meta.KafkaGroup, rev uint64) {
	mine := maps.Clone(g.offsets)
	if rev != 0 {
		g.setOffsets(rec.Offsets)
	}
	for k := range g.unwritten {
		if o, ok := mine[k.topic][k.part]; ok {
			g.putOffset(k, o)
		}
	}
	adopted := rev != 0 && rec.Generation > g.writtenGen
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
	g.dirty = !adopted || len(g.unwritten) > 0 // adopted as it stands: nothing to write
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
	g.deleting <- err
	g.mu.Unlock()
	c.forget(g)
}

// record is the group's record as it stands (g.mu held); the unwritten
// commits move in flight.
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
