package sim

import (
	"slices"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// In-doubt re-append (docs/design.md#read-path; actors/node/reappend.go and
// actors.Client.Reappend). A reader's core.InDoubtReport is sent (a lossy
// message) to every node; a node that is up queues it as a repair target.
// Each pass looks at its targets first: a one-offset scan of the peers,
// PlanRange and its fixes, then core.StripeAt. Fewer than k shards of the
// stripe: done if every node answered in full (never committed there),
// else kept (up to inDoubtKeep). Decodable: the lowest heard position
// re-appends it, the others hand the report to that node (handoffPasses
// times, then forget it). The re-append decodes the
// stripe from k shards and writes it again as a producer would, with a
// core.Writer on the node's clock: the same stripe id at a fresh offset,
// all n shards, acked at W; a node re-appends a stripe once per life.
// Readers dedupe by stripe id: the copy is a "moved" or "redelivered"
// stripe for the checks, and its offsets join the truth's offsets.

// reportInDoubt sends a reader's in-doubt report to every node.
func (s *sim) reportInDoubt(from string, d core.InDoubtReport) {
	if s.repair == nil {
		return
	}
	for _, n := range s.nodes {
		s.send(n.slow, func() string { return sprintf("%s->n%d in-doubt %s", from, n.id, sid(d.Stripe)) },
			func() { s.repair.nodes[n.id].addTarget(d.Offset, d.Stripe) })
	}
}

// addTarget queues a report at a node that is up (a down one misses it).
func (r *repairer) addTarget(off uint64, id stripe.ID) {
	if !r.n.up {
		return
	}
	r.sync()
	if _, ok := r.targets[off]; !ok {
		r.targets[off] = &rtarget{id: id, first: r.s.now}
	}
	r.targetsAdded = true
}

// targetsDue is actors' targetsBetweenRanges: the targets run from inside
// a walk when one was added since they last ran, or when they last ran a
// pass interval ago and some are waiting.
func (r *repairer) targetsDue() bool {
	return len(r.targets) > 0 && (r.targetsAdded || r.s.now-r.targetsRun >= int64(r.s.cfg.RepairEvery))
}

// runTargets handles the queued targets in offset order, then calls done.
func (r *repairer) runTargets(done func()) {
	r.targetsAdded, r.targetsRun = false, r.s.now
	offs := make([]uint64, 0, len(r.targets))
	for off := range r.targets {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	epoch := r.n.epoch
	var next func(int)
	next = func(i int) {
		if i == len(offs) {
			done()
			return
		}
		off := offs[i]
		tg := r.targets[off]
		if tg == nil {
			next(i + 1)
			return
		}
		r.target(off, tg, func(over bool) {
			if over && r.n.epoch == epoch {
				delete(r.targets, off)
			}
			next(i + 1)
		})
	}
	next(0)
}

// target is actors' repairTarget for an in-doubt report.
func (r *repairer) target(off uint64, tg *rtarget, done func(bool)) {
	rc := r.config()
	r.scanPeers(off, off+1, false, nil, func(peers []core.PeerScan) {
		plan := core.PlanRange(rc, off, off+1, r.local(off, off+1), peers, false)
		r.applyFixes(rc, plan.Fixes, func(fixed bool) {
			ok := fixed && len(plan.Unresolved) == 0
			r.resolveInDoubt(rc, off, tg, r.local(off, off+1), peers, func(over bool) { done(over && ok) })
		})
	})
}

// resolveInDoubt is actors' resolveInDoubt.
func (r *repairer) resolveInDoubt(rc core.RepairConfig, off uint64, tg *rtarget, local []core.LocalSlot, peers []core.PeerScan, done func(bool)) {
	s := r.s
	ref, members, heard := core.StripeAt(rc, off, tg.id, local, peers)
	if len(members) < s.params.K {
		all := 0
		for _, ps := range peers {
			if ps.Heard && ps.Complete {
				all++
			}
		}
		// Never committed there if every node answered in full; else keep
		// it, up to inDoubtKeep.
		done(all == s.params.N-1 || s.now-tg.first > inDoubtKeep)
		return
	}
	if heard[0] != rc.Pos {
		to := s.nodes[heard[0]]
		s.send(r.n.slow || to.slow, func() string { return sprintf("n%d->n%d in-doubt hand-over %s", r.n.id, to.id, sid(tg.id)) },
			func() { s.repair.nodes[to.id].addTarget(off, tg.id) })
		tg.handoffs++
		done(tg.handoffs >= handoffPasses)
		return
	}
	if r.reappended[tg.id] {
		done(true)
		return
	}
	r.payload(off, ref, members, func(payload []byte, err error) {
		if err != nil {
			s.log.add("n%d repair: cannot decode in-doubt %s %s: %v", r.n.id, sid(tg.id), s.log.off(off), err)
			done(false)
			return
		}
		r.reappend(tg.id, off, payload, func(ok bool) {
			if ok {
				r.reappended[tg.id] = true
			}
			done(ok)
		})
	})
}

// payload decodes the stripe of group ref at off from k shards: this
// node's own and fetched ones.
func (r *repairer) payload(off uint64, ref stripe.ShardHeader, members []int, done func([]byte, error)) {
	s := r.s
	shards := make([]*stripe.Shard, s.params.N)
	have := 0
	if b, ok := r.n.disk[core.RangeStart(off)][off]; ok {
		if sh, err := stripe.Parse(b); err == nil && sh.SameStripe(&ref) && int(sh.Index) == r.n.id {
			shards[r.n.id] = &sh
			have++
		}
	}
	var next func(int)
	next = func(i int) {
		if have >= s.params.K || i == len(members) {
			b, err := stripe.Decode(shards)
			done(b, err)
			return
		}
		pos := members[i]
		if pos == r.n.id {
			next(i + 1)
			return
		}
		r.fetch(pos, off, func(b []byte) {
			if b != nil {
				if sh, err := stripe.Parse(b); err == nil && sh.SameStripe(&ref) && int(sh.Index) == pos {
					shards[pos] = &sh
					have++
				}
			}
			next(i + 1)
		})
	}
	next(0)
}

// reappender writes one in-doubt stripe again through a core.Writer on
// its node's clock (actors' reappend).
type reappender struct {
	r       *repairer
	w       *core.Writer
	id      stripe.ID
	payload []byte
	epoch   int
	acked   uint64
	over    bool
	done    func(bool)
}

func (a *reappender) name() string { return sprintf("n%d.reappend", a.r.n.id) }

// reappend writes payload as stripe id at a fresh offset on every node.
func (r *repairer) reappend(id stripe.ID, from uint64, payload []byte, done func(bool)) {
	a := &reappender{r: r, w: core.NewWriter(core.DefaultWriterConfig(r.s.params)), id: id, payload: payload, epoch: r.n.epoch, done: done}
	r.s.log.add("n%d repair: re-append in-doubt %s from %s", r.n.id, sid(id), r.s.log.off(from))
	a.send(a.w.Start(r.n.clock(), id))
	a.tick()
}

func (a *reappender) live() bool { return !a.over && a.r.n.epoch == a.epoch }

func (a *reappender) tick() {
	if !a.live() {
		return
	}
	a.handle(a.w.Tick(a.r.n.clock(), a.r.s.rnd))
	a.r.n.after(a.r.s.now+tickEvery, a.tick)
}

// send carries out a Send: shard i to node i.
func (a *reappender) send(snd core.Send) {
	s := a.r.s
	s.truth.offsets[a.id] = append(s.truth.offsets[a.id], snd.Offset)
	shards, err := stripe.Encode(a.id, snd.Offset, s.cfg.Nodes, s.cfg.K, a.payload)
	if err != nil {
		s.violate("%s: encode: %v", a.name(), err)
		return
	}
	s.log.add("%s send %s#%d %s", a.name(), sid(a.id), snd.Attempt, s.log.off(snd.Offset))
	for i, n := range s.nodes {
		b := shards[i].Marshal()
		s.send(n.slow || a.r.n.slow, func() string { return sprintf("%s->n%d write %s#%d", a.name(), i, sid(a.id), snd.Attempt) },
			func() { n.write(a, snd, b) })
	}
}

func (a *reappender) reply(snd core.Send, node int, st core.Status, clock int64) {
	if !a.live() {
		return
	}
	a.handle(a.w.Reply(a.r.n.clock(), a.r.s.rnd, snd.ID, snd.Attempt, node, st, clock))
}

// handle carries out the writer's output for the one stripe, in
// WriterOutput's order: its Done comes last, after its Ack or Fail.
func (a *reappender) handle(out core.WriterOutput) {
	s := a.r.s
	for _, e := range out.Acks {
		a.acked = e.Offset
		s.res.Reappended++
		s.repair.lastWrite = s.now
		s.log.add("%s ACK %s %s", a.name(), sid(a.id), s.log.off(e.Offset))
	}
	for _, e := range out.Fails {
		s.log.add("%s FAIL %s: %v", a.name(), sid(a.id), e.Err)
	}
	for _, e := range out.Sends {
		a.send(e)
	}
	if len(out.Done) > 0 {
		a.over = true
		a.done(a.acked != 0)
	}
}
