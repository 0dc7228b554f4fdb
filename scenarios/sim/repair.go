package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// Repair (docs/design.md#repair-and-scrub; actors/repair_pass.go). With Config.RepairEvery set,
// every node runs a repair pass that often: first the queued in-doubt
// targets (reappend.go), then, for its partition, what core.RepairSpans
// says (the gap below a reborn node's birth, and the rolling window),
// range by range as core.RepairWalk decides: a headers scan of the range
// on every peer (simulated messages, with the sim's delays, drops and
// crashes: a peer that does not answer within scanTimeout is unheard, and
// dead for the rest of the walk; a fail-fast one is unheard), the node's
// durable slots, core.PlanRange, then for each fix k whole shards fetched
// from its sources and core.RebuildShard, written through the owner's
// RepairWrite (durable with the node's group commit, answered once
// durable), and the walk's Settle; its marks (repaired, verified) and
// holes are made durable behind those writes. A crash ends the pass and
// loses the walk's memory (the settled sets, the targets); a wipe loses
// the marks too. A reborn node's owners learn the repaired mark and holes
// before every scan (Owner.SetRepaired, as the owner actor's
// refreshRepaired): below the mark they answer, not "unknown".
//
// At the end (finishRepair) every outage is over, the network stops
// losing messages and the passes run until every node's repair horizon
// is past every offset written, plus a few passes. Checks: every acked
// stripe then has n shards (at its acked offset, or a full copy at
// another offset it was written at: a rewrite or a re-append), except
// where the missing slot holds another stripe's shard (write-once:
// counted, RepairConflicts) and stripes a wipe left with fewer than k
// shards; every shard repair writes is exactly the shard its producer
// would have sent there (re-encoded from the truth: RebuildShard's proof,
// checked independently); repair writes go through the write-once checks
// of node.go (a slot accepted twice, a durable slot overwritten).
//
// Not modelled: the clock-watch skip of a pass, prefetching, the repair
// rate limit, scrub and corrupt targets (the simulated disks do not rot),
// retention. InDoubtKeep is scaled down (inDoubtKeep).

// Repair constants (node.RepairConfig's defaults where they matter).
const (
	repairWindow  = 10 * int64(time.Minute) // RepairConfig.Window: the whole run
	repairMargin  = int64(time.Second)      // RepairConfig.Margin
	handoffPasses = 3                       // actors.handoffPasses
	// inDoubtKeep is RepairConfig.InDoubtKeep scaled to the simulation
	// (1 h in raidq): an in-doubt target that never becomes decodable is
	// given up after this long (an offset a wipe left unknown for good).
	inDoubtKeep = 10 * int64(time.Second)
	finalPasses = 4 // passes run once the horizon is past every write
	// repairConcurrency bounds the fixes rebuilt at once (RepairConfig.Concurrency).
	repairConcurrency = 8
	// finalLimit bounds the end of a repair run past its planned end, while
	// passes still write.
	finalLimit = 60 * int64(time.Second)
)

// repairRun is the repair state of every node.
type repairRun struct {
	nodes     []*repairer
	payloads  map[stripe.ID][]byte // the truth's payloads, for the proof check
	lastWrite int64                // true time of the last repair write or re-append
	from      int64                // finishRepair: every horizon is past every write from then on
	wrote     map[repairSlot]int64 // when repair wrote each slot it wrote (progress.go)
}

// settled reports whether every node completed finalPasses passes since
// from, the last of them started after the last write.
func (rr *repairRun) settled() bool {
	for _, r := range rr.nodes {
		if r.finals < finalPasses || !r.clean {
			return false
		}
	}
	return true
}

// repairer is one node's repair loop for the partition.
type repairer struct {
	s *sim
	n *node
	// Durable (the store's marks and holes): kept across crashes, lost
	// with a wipe.
	inc                int
	repaired, verified uint64
	holes              []uint64
	// Memory of this process (lost with a crash).
	epoch            int
	gapDone, winDone core.Intervals
	targets          map[uint64]*rtarget
	reappended       map[stripe.ID]bool
	busy             bool // a pass is running (in this epoch)
	targetsAdded     bool // a target was queued since the targets last ran
	targetsRun       int64
	// The end of the run (finishRepair): passes completed that started
	// once every horizon was past every write, and whether the last one
	// started after the last repair write or re-append anywhere.
	finals int
	clean  bool
}

// rtarget is a queued in-doubt report.
type rtarget struct {
	id       stripe.ID
	first    int64 // when it was queued (true time)
	handoffs int
}

// withRepair turns the repair loop on for about one seed in three, from a
// random stream of its own (every older knob keeps its value for a seed).
func withRepair(c Config, seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0x4e9a))
	on, every := r.IntN(3) == 0, []time.Duration{300 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond}[r.IntN(3)]
	if on {
		c.RepairEvery = every
	}
	return c
}

// scheduleRepair starts every node's repair loop, each at its own phase.
func (s *sim) scheduleRepair() {
	if s.cfg.RepairEvery <= 0 {
		return
	}
	s.repair = &repairRun{payloads: map[stripe.ID][]byte{}, wrote: map[repairSlot]int64{}}
	every := int64(s.cfg.RepairEvery)
	for _, n := range s.nodes {
		r := &repairer{s: s, n: n, targets: map[uint64]*rtarget{}, reappended: map[stripe.ID]bool{}}
		s.repair.nodes = append(s.repair.nodes, r)
		s.at(s.now+writeStart+s.rnd.Int64N(every), r.tick)
	}
}

// sync drops what a crash (memory) or a wipe (store) lost.
func (r *repairer) sync() {
	if r.inc != r.n.inc {
		r.inc, r.repaired, r.verified, r.holes = r.n.inc, 0, 0, nil
	}
	if r.epoch != r.n.epoch {
		r.epoch, r.busy = r.n.epoch, false
		r.gapDone, r.winDone = core.Intervals{}, core.Intervals{}
		r.targets, r.reappended = map[uint64]*rtarget{}, map[stripe.ID]bool{}
	}
}

// tick starts a pass unless one is running or the node is down.
func (r *repairer) tick() {
	s := r.s
	s.at(s.now+int64(s.cfg.RepairEvery), r.tick)
	if !r.n.up {
		return
	}
	r.sync()
	if r.busy {
		return
	}
	r.busy = true
	s.res.RepairPasses++
	start := s.now
	r.runTargets(func() {
		r.walkSpans(core.RepairSpans(r.n.clock(), r.spanConfig()), func() {
			r.busy = false
			if s.repair.from > 0 && start >= s.repair.from {
				r.clean = start > s.repair.lastWrite
				r.finals++
			}
		})
	})
}

// birth is the node's incarnation birth as it matters for the topic
// (Topic.BirthFor).
func (r *repairer) birth() uint64 {
	if b := r.n.birth; b > r.s.topicCreated() {
		return b
	}
	return 0
}

func (r *repairer) config() core.RepairConfig {
	return core.RepairConfig{Params: r.s.params, Pos: r.n.id, Birth: r.birth()}
}

func (r *repairer) spanConfig() core.SpanConfig {
	return core.SpanConfig{Created: r.s.topicCreated(), Birth: r.birth(), Repaired: r.repaired, Verified: r.verified,
		Window: repairWindow, Horizon: int64(r.s.params.ReadDelay) + repairMargin}
}

// walkSpans walks spans in order, then calls done.
func (r *repairer) walkSpans(spans []core.Span, done func()) {
	if len(spans) == 0 {
		done()
		return
	}
	r.walk(spans[0], func() { r.walkSpans(spans[1:], done) })
}

// walk is actors' maintenance.walk: range by range, as core.RepairWalk says.
func (r *repairer) walk(sp core.Span, done func()) {
	set := &r.winDone
	if sp.Gap {
		set = &r.gapDone
	}
	w := core.NewRepairWalk(sp, set)
	dead := map[int]bool{}
	rc := r.config()
	var step, walkRange func()
	step = func() {
		if r.targetsDue() {
			r.runTargets(walkRange) // targetsBetweenRanges, then the next range
			return
		}
		walkRange()
	}
	walkRange = func() {
		cur, to, ok := w.Next()
		if !ok {
			r.saveMarks(sp, w.Mark(), w.TakeHoles(), done)
			return
		}
		r.scanPeers(cur, to, true, dead, func(peers []core.PeerScan) {
			local := r.local(cur, to)
			if r.s.cfg.inject.repairReplace {
				local = nil
			}
			plan := core.PlanRange(rc, cur, to, local, peers, true)
			apply := r.applyFixes
			if r.s.cfg.inject.repairSkipFix {
				apply = func(_ core.RepairConfig, _ []core.Fix, cb func(bool)) { cb(true) }
			}
			apply(rc, plan.Fixes, func(fixed bool) {
				if w.Settle(plan, fixed) {
					r.saveMarks(sp, w.Mark(), w.TakeHoles(), step)
					return
				}
				step()
			})
		})
	}
	step()
}

// saveMarks makes the walk's mark and holes durable behind every repair
// write before them, then goes on.
func (r *repairer) saveMarks(sp core.Span, mark uint64, holes []uint64, next func()) {
	old := r.verified
	if sp.Gap {
		old = r.repaired
	}
	if mark <= old && len(holes) == 0 {
		next()
		return
	}
	r.n.durable(func() {
		if len(holes) > 0 {
			merged := slices.Concat(r.holes, holes)
			slices.Sort(merged)
			merged = slices.Compact(merged)
			r.s.res.Holes += len(merged) - len(r.holes)
			r.holes = merged
			r.s.log.add("n%d repair: %d holes left unknown for good", r.n.id, len(holes))
		}
		if sp.Gap {
			if mark > r.repaired {
				r.repaired = mark
				r.s.log.add("n%d repair: gap refilled up to %s", r.n.id, r.s.log.off(mark))
			}
		} else {
			r.verified = max(r.verified, mark)
		}
		next()
	})
}

// local checks the node's durable slots of [from, to) (core.CheckLocal).
func (r *repairer) local(from, to uint64) []core.LocalSlot {
	var out []core.LocalSlot
	for _, e := range r.n.entries(core.RangeStart(from), from, to) {
		out = append(out, core.CheckLocal(e.Offset, e.Shard))
	}
	return out
}

// scanPeers scans [from, to) on every other node (not those in dead,
// which collects the ones that time out) and calls done with every
// answer, unheard ones included.
func (r *repairer) scanPeers(from, to uint64, probe bool, dead map[int]bool, done func([]core.PeerScan)) {
	s := r.s
	out := make([]core.PeerScan, 0, len(s.nodes)-1)
	pending := 0
	for _, peer := range s.nodes {
		if peer == r.n {
			continue
		}
		i := peer.id
		if dead != nil && dead[i] {
			out = append(out, core.PeerScan{Node: i})
			continue
		}
		pending++
		r.ask(peer, from, to, probe, func(ps core.PeerScan, timedOut bool) {
			if timedOut && dead != nil {
				dead[i] = true
			}
			out = append(out, ps)
			pending--
			if pending == 0 {
				slices.SortFunc(out, func(a, b core.PeerScan) int { return a.Node - b.Node })
				done(out)
			}
		})
	}
	if pending == 0 {
		r.n.after(s.now, func() { done(out) })
	}
}

// ask sends one repair scan of [from, to) to peer and calls done once,
// with its answer or, after scanTimeout, unheard (timedOut). The request
// and the answer are messages; a crash of this node drops the callback.
func (r *repairer) ask(peer *node, from, to uint64, probe bool, done func(core.PeerScan, bool)) {
	s := r.s
	n := r.n
	settled := false
	finish := func(ps core.PeerScan, timedOut bool) {
		if !settled {
			settled = true
			done(ps, timedOut)
		}
	}
	epoch := n.epoch
	answer := func(ps core.PeerScan) {
		if n.epoch == epoch {
			finish(ps, false)
		}
	}
	slow := n.slow || peer.slow
	s.send(slow, func() string { return sprintf("n%d->n%d repair scan", n.id, peer.id) },
		func() { peer.repairScan(n, slow, from, to, probe, answer) })
	n.after(s.now+scanTimeout, func() { finish(core.PeerScan{Node: peer.id}, true) })
}

// repairScan serves another node's repair scan (no seal: repair looks
// only behind every accept window): OK with the durable slots, or, below
// a reborn node's repaired mark, UNKNOWN with what it has (heard, not
// complete).
func (n *node) repairScan(from *node, slow bool, lo, hi uint64, probe bool, answer func(core.PeerScan)) {
	s := n.s
	reply := func(ps core.PeerScan) {
		s.send(slow, func() string { return sprintf("n%d->n%d repair scan reply", n.id, from.id) }, func() { answer(ps) })
	}
	if n.down(func() string { return sprintf("repair scan from n%d", from.id) }, func() { answer(core.PeerScan{Node: n.id}) }) {
		return
	}
	o := n.owner(core.RangeStart(lo))
	s.refreshRepaired(n, o)
	d := o.Scan(n.clock(), lo, hi, false)
	if d.Status != core.StatusOK {
		reply(core.PeerScan{Node: n.id})
		return
	}
	n.after(max(n.synced, s.now), func() {
		ps := core.PeerScan{Node: n.id, Heard: true, Complete: !d.Unknown, Entries: n.entries(core.RangeStart(lo), lo, hi)}
		if probe {
			ps.After = n.firstAfter(hi)
		}
		reply(ps)
	})
}

// refreshRepaired gives a reborn node's owner the repaired mark and holes
// before a scan (the owner actor's refreshRepaired).
func (s *sim) refreshRepaired(n *node, o *core.Owner) {
	if s.repair == nil {
		return
	}
	r := s.repair.nodes[n.id]
	r.sync()
	if r.birth() == 0 {
		return
	}
	o.SetRepaired(r.repaired, r.holes)
}

// applyFixes rebuilds and writes the fixes, repairConcurrency at a time
// (RepairConfig.Concurrency); false if any failed.
func (r *repairer) applyFixes(rc core.RepairConfig, fixes []core.Fix, done func(bool)) {
	if len(fixes) == 0 {
		done(true)
		return
	}
	ok := true
	started, finished := 0, 0
	var more func()
	more = func() {
		for started < len(fixes) && started-finished < repairConcurrency {
			f := fixes[started]
			started++
			r.fix(rc, f, func(fixed bool) {
				ok = ok && fixed
				finished++
				if finished == len(fixes) {
					done(ok)
					return
				}
				more()
			})
		}
	}
	more()
}

// fix rebuilds one shard of this node and writes it through its owner.
func (r *repairer) fix(rc core.RepairConfig, f core.Fix, done func(bool)) {
	s := r.s
	r.rebuild(rc, f, func(shard []byte, err error) {
		if err != nil {
			s.log.add("n%d repair: cannot rebuild %s %s: %v", r.n.id, sid(f.Group.ID), s.log.off(f.Offset), err)
			done(false)
			return
		}
		s.checkRebuilt(r.n, shard)
		r.n.repairWrite(shard, func(st core.Status) {
			s.log.add("n%d repair write %s %s -> %s", r.n.id, sid(f.Group.ID), s.log.off(f.Offset), st)
			done(st == core.StatusOK || st == core.StatusConflict)
		})
	})
}

// rebuild fetches k shards of the fix's group (a batch at a time, the next
// sources when some fail) and rebuilds this node's shard.
func (r *repairer) rebuild(rc core.RepairConfig, f core.Fix, done func([]byte, error)) {
	k := r.s.params.K
	fetched := map[int][]byte{}
	next := 0
	var round func()
	round = func() {
		if len(fetched) >= k || next >= len(f.Sources) {
			if len(fetched) < k {
				done(nil, fmt.Errorf("%w: fetched %d of k=%d", stripe.ErrTooFewShards, len(fetched), k))
				return
			}
			if r.s.cfg.inject.repairNoProof {
				for _, pos := range f.Sources {
					if b, ok := fetched[pos]; ok {
						sh, _ := stripe.Parse(b)
						sh.Index = uint8(rc.Pos)
						done(sh.Marshal(), nil)
						return
					}
				}
			}
			b, err := core.RebuildShard(rc, f, fetched)
			done(b, err)
			return
		}
		batch := f.Sources[next:min(next+k-len(fetched), len(f.Sources))]
		next += len(batch)
		pending := len(batch)
		for _, pos := range batch {
			r.fetch(pos, f.Offset, func(b []byte) {
				if b != nil {
					if sh, err := stripe.Parse(b); err == nil && sh.SameStripe(&f.Group) {
						fetched[pos] = b
					}
				}
				pending--
				if pending == 0 {
					round()
				}
			})
		}
	}
	round()
}

// fetch reads the whole shard at off from node pos (a scan of [off,
// off+1)); nil if it did not answer or has none.
func (r *repairer) fetch(pos int, off uint64, done func([]byte)) {
	r.ask(r.s.nodes[pos], off, off+1, false, func(ps core.PeerScan, _ bool) {
		if ps.Heard && len(ps.Entries) == 1 && ps.Entries[0].Offset == off {
			done(ps.Entries[0].Shard)
			return
		}
		done(nil)
	})
}

// repairWrite carries out core.Owner.RepairWrite for a rebuilt shard:
// answered once durable.
func (n *node) repairWrite(b []byte, done func(core.Status)) {
	s := n.s
	sh, err := stripe.Parse(b)
	if err != nil {
		s.violate("n%d: repair rebuilt an unreadable shard: %v", n.id, err)
		done(core.StatusBadRequest)
		return
	}
	off := sh.Offset
	d := n.owner(core.RangeStart(off)).RepairWrite(n.clock(), off, &sh.ShardHeader, s.cfg.inject.repairReplace)
	switch {
	case d.Persist:
		n.repairAccepted(off, sh)
		n.durable(func() {
			n.store(off, b)
			s.res.RepairedShards++
			s.repair.lastWrite = s.now
			if _, ok := s.repair.wrote[repairSlot{n.id, off}]; !ok {
				s.repair.wrote[repairSlot{n.id, off}] = s.now
			}
			done(core.StatusOK)
		})
	case d.Barrier:
		n.after(max(n.synced, s.now), func() { done(core.StatusOK) })
	default:
		done(d.Status)
	}
}

// repairAccepted is node.accepted's write-once check within this life of
// the node. A reborn node may take, by repair, another stripe's shard
// where its earlier incarnation held one that could not have committed
// (the walk rebuilds only decodable stripes), so the earlier incarnation
// is not checked here.
func (n *node) repairAccepted(off uint64, sh stripe.Shard) {
	si := core.SlotInfo{ID: sh.ID, Index: sh.Index, DataCRC: sh.DataCRC}
	if cur, ok := n.mem[off]; ok && cur != si {
		n.s.violate("n%d: repair changed slot %s from %s to %s", n.id, n.s.log.off(off), sid(cur.ID), sid(si.ID))
	}
	n.mem[off] = si
}

// checkRebuilt: a shard repair is about to write is byte for byte the one
// its producer (or re-appender) would have sent to this node at its
// offset, re-encoded from the truth.
func (s *sim) checkRebuilt(n *node, b []byte) {
	h, err := stripe.ParseHeader(b)
	if err != nil {
		s.violate("n%d: repair rebuilt an unreadable shard: %v", n.id, err)
		return
	}
	want, ok := s.expectShard(h.ID, h.Offset, int(h.Index))
	switch {
	case !ok:
		s.violate("n%d: repair rebuilt %s at %s, which nobody sent", n.id, sid(h.ID), s.log.off(h.Offset))
	case int(h.Index) != n.id:
		s.violate("n%d: repair rebuilt shard %d of %s at %s, not its own", n.id, h.Index, sid(h.ID), s.log.off(h.Offset))
	case string(want) != string(b):
		s.violate("n%d: repair rebuilt shard %d of %s at %s, which does not re-encode to the stripe sent", n.id, h.Index,
			sid(h.ID), s.log.off(h.Offset))
	}
}

// expectShard re-encodes shard idx of stripe id at off from the records
// the producer sent.
func (s *sim) expectShard(id stripe.ID, off uint64, idx int) ([]byte, bool) {
	payload, ok := s.repair.payloads[id]
	if !ok {
		vs, sent := s.truth.values[id]
		if !sent {
			return nil, false
		}
		recs := make([]stripe.Record, len(vs))
		for i, v := range vs {
			recs[i] = stripe.Record{Key: []byte(fmt.Sprint(int(id.Producer[0]) - 1)), Value: []byte(v)}
		}
		var err error
		if payload, err = stripe.AppendBatch(nil, recs); err != nil {
			return nil, false
		}
		s.repair.payloads[id] = payload
	}
	shards, err := stripe.Encode(id, off, s.cfg.Nodes, s.cfg.K, payload)
	if err != nil || idx < 0 || idx >= len(shards) {
		return nil, false
	}
	return shards[idx].Marshal(), true
}

// finishRepair ends a repair run: once every outage is over, the network
// heals and the passes run until every node's horizon is past every
// offset written, and then until every node completed finalPasses passes
// since, the last of them started after the last repair write or
// re-append anywhere (within finalLimit).
func (s *sim) finishRepair() {
	if s.repair == nil || s.running() {
		return // no repair, or stuck (reported)
	}
	s.healed = true
	last := s.now
	for _, o := range s.outages {
		last = max(last, o.end)
	}
	high := s.truth.maxOffset
	for _, offs := range s.truth.offsets {
		for _, o := range offs {
			high = max(high, o)
		}
	}
	hz := int64(s.params.ReadDelay) + repairMargin
	until := last
	for _, n := range s.nodes {
		until = max(until, int64(high)+hz-n.skew+int64(time.Millisecond))
	}
	s.repair.from = until
	s.log.add("repair: healed; every horizon past every write from %s", s.log.at(until))
	limit := until + finalLimit
	for !s.repair.settled() {
		e := s.next()
		if e == nil || e.at > limit {
			var st []string
			for _, r := range s.repair.nodes {
				st = append(st, sprintf("n%d: %d passes, clean %v, busy %v", r.n.id, r.finals, r.clean, r.busy))
			}
			s.violate("repair: passes did not settle within %v of %s (%s)", time.Duration(finalLimit), s.log.at(until), strings.Join(st, "; "))
			break
		}
		s.now = e.at
		e.fn()
	}
	s.log.add("repair: settled")
	for _, n := range s.nodes {
		if !n.up {
			s.violate("repair: n%d still down at the end", n.id)
		}
	}
}

// repairedVoid: with repair, a reborn node may answer for an offset its
// earlier incarnation held once its walk settled it (below the repaired
// mark, not a hole) and the stripe there could not have been committed:
// with this node's old shard it has fewer than W (PlanRange's void).
func (s *sim) repairedVoid(n *node, off uint64) bool {
	if s.repair == nil {
		return false
	}
	r := s.repair.nodes[n.id]
	if off >= r.repaired || slices.Contains(r.holes, off) {
		return false
	}
	h, err := stripe.ParseHeader(n.past[off])
	return err == nil && len(s.holders(h.ID, off))+1 < s.params.W
}

// checkRepaired: after the final passes every acked stripe has n shards
// (see the file comment).
func (s *sim) checkRepaired() {
	if s.repair == nil || s.running() {
		return
	}
	for _, id := range sortedIDs(s.truth.acked) {
		if s.wipeLost(id) {
			continue // fewer than k shards: nothing can rebuild it (kept in doubt)
		}
		full := false
		for _, off := range s.truth.offsets[id] {
			if len(s.holders(id, off)) == s.params.N {
				full = true
			}
		}
		if full {
			continue
		}
		off := s.truth.acked[id]
		have := s.holders(id, off)
		var missing, taken []int
		for _, n := range s.nodes {
			if contains(have, n.id) {
				continue
			}
			missing = append(missing, n.id)
			if b, ok := n.disk[core.RangeStart(off)][off]; ok {
				if h, err := stripe.ParseHeader(b); err == nil && (h.ID != id || int(h.Index) != n.id) {
					taken = append(taken, n.id)
				}
			}
		}
		if len(taken) == len(missing) {
			s.res.RepairConflicts++
			s.log.add("repair: %s at %s short on n%s, where other stripes hold the slots", sid(id), s.log.off(off), nodeList(taken))
			continue
		}
		s.violate("repair: %s acked at %s has %d of n=%d shards after the final passes (missing on n%s)",
			sid(id), s.log.off(off), len(have), s.params.N, nodeList(missing))
	}
}

func (r *Result) repairSummary() string {
	if r.Config.RepairEvery <= 0 {
		return ""
	}
	return sprintf(" repair-passes=%d repaired=%d repair-conflicts=%d reappended=%d holes=%d",
		r.RepairPasses, r.RepairedShards, r.RepairConflicts, r.Reappended, r.Holes)
}

// heldFirst keeps the holders whose shard at off repair did not write
// (progress.go): a reader that heard a node empty there does not ask it
// again, so a shard repaired later does not make the stripe readable to
// it; the stripe reaches it through a re-append (reappend.go), in repair
// time, which the progress bound does not cover.
func (s *sim) heldFirst(holders []int, off uint64) []int {
	if s.repair == nil {
		return holders
	}
	var out []int
	for _, h := range holders {
		if _, ok := s.repair.wrote[repairSlot{h, off}]; !ok {
			out = append(out, h)
		}
	}
	return out
}

// repairSlot names one node's slot.
type repairSlot struct {
	node int
	off  uint64
}
