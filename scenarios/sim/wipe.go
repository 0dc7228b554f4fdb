package sim

import (
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// Wipes (docs/design.md#slot-store incarnation). Config.Wipes nodes crash, lose their
// whole store (slots and seals) and restart as a new incarnation, with
// their clock set back by up to Config.WipeClockBack (a replacement
// machine not yet synced). The new incarnation's birth comes from cluster
// time, as node.SettleBirth takes it: core.BirthInput with the node's
// clock, the clocks its peers answer with (the nodes up, plus a round
// trip) and the topic's creation, plus core.BirthMargin. Below its birth
// the node's owners answer scans "unknown" (core.ScanDecision.Unknown,
// read as unheard, as the reader actor reads bus.StatusUnknown) and
// refuse writes (SEALED).
//
// Without repair (Config.RepairEvery 0) a wiped node stays unknown below
// its birth for good; with it, its gap walk refills the time before its
// birth and its owners answer below the repaired mark (repair.go), but
// holes (stripes no peer can rebuild) stay unknown. Either way it counts
// as down for good in the fault model: with it, at most n-W-1 other nodes are down at once (fits). An
// acked stripe the wipe left with fewer than k shards (it was on exactly
// W=k nodes, one of them the wiped one) cannot be read any more; what the
// protocol still promises is that it is never silently passed: a reader
// keeps it in doubt (deferred, LowWater held at it) for as long as the
// node cannot say, which is for good here (wipeLost, wipeStuck).
//
// Checks: a node never answers a scan as heard (empty) for an offset an
// earlier incarnation of it held (node.scan, checkBirth), never takes a
// write over a shard an earlier incarnation held (node.accepted), and
// the acked stripes a wipe made unreadable are kept in doubt, not voided
// (checkAckedDelivered, checkInDoubt, checkGroup). The birthOwnClock bug
// takes the birth from the node's clock alone: with that clock behind by
// seconds, the node answers "empty" for the offsets its old incarnation
// held after it (finding 4), so a stripe left with k-1 shards reads as
// void.

// topicCreated is the simulated topic's creation time: before every
// reader's start.
func (s *sim) topicCreated() uint64 { return s.readerStart() - uint64(time.Second) }

// planWipes adds Config.Wipes wipes to plan, each down for 0.1-1.5 s,
// counting as down for good (fits).
func (s *sim) planWipes(plan []outage) []outage {
	span := s.faultSpan()
	for range s.cfg.Wipes {
		for try := 0; try < 10; try++ {
			o := outage{node: s.rnd.IntN(s.cfg.Nodes), start: s.now + writeStart + s.rnd.Int64N(span), what: "wipe"}
			o.end = o.start + int64(100*time.Millisecond) + s.rnd.Int64N(int64(1400*time.Millisecond))
			if s.fits(plan, o) {
				o.kind = s.crashKind()
				o.back = s.rnd.Int64N(int64(s.cfg.WipeClockBack) + 1)
				plan = append(plan, o)
				break
			}
		}
	}
	return plan
}

// wipe loses the node's whole store; what its incarnations held stays
// known to the checks (past).
func (n *node) wipe() {
	s := n.s
	for _, slots := range n.disk {
		for off, b := range slots {
			n.past[off] = b
		}
	}
	n.disk = map[uint64]map[uint64][]byte{}
	n.seals = map[uint64]uint64{}
	n.wipedAt = s.now
	s.res.Wiped++
	s.log.add("n%d WIPED: its store is gone (%d slots held)", n.id, len(n.past))
}

// reborn starts the node's new incarnation after a wipe: its clock set
// back by o.back, its birth from cluster time (or, with birthOwnClock,
// from its own clock).
func (n *node) reborn(o outage) {
	s := n.s
	n.skew -= o.back
	p := s.params
	in := core.BirthInput{Own: uint64(n.clock()), Created: []uint64{s.topicCreated()},
		Margin: core.BirthMargin(int64(p.FutureBound), int64(p.MaxSkew))}
	for _, peer := range s.nodes {
		if peer != n && peer.up {
			in.Clocks = append(in.Clocks, uint64(peer.clock()+2*kvHop))
		}
	}
	n.birth = in.Birth()
	if s.cfg.inject.birthOwnClock {
		n.birth = in.Own
	}
	n.inc++
	s.log.add("n%d REBORN as incarnation #%d, clock set back %v (now %s), birth %s from %d peer clocks", n.id, n.inc,
		time.Duration(o.back).Round(time.Millisecond), s.log.skew(n.skew), s.log.off(n.birth), len(in.Clocks))
}

// checkBirth: a heard answer for [from, to) must not hide a shard an
// earlier incarnation of the node held there (but for a void offset its
// repair settled: repairedVoid).
func (n *node) checkBirth(from, to uint64) {
	first, found := uint64(0), false
	for off := range n.past {
		if _, ok := n.disk[core.RangeStart(off)][off]; off >= from && off < to && !ok && (!found || off < first) && !n.s.repairedVoid(n, off) {
			first, found = off, true
		}
	}
	if found {
		n.s.violate("n%d (incarnation #%d, birth %s) answered a scan of [%s,%s) as heard without %s, which its earlier incarnation held",
			n.id, n.inc, n.s.log.off(n.birth), n.s.log.off(from), n.s.log.off(to), n.s.log.off(first))
	}
}

// bornAfter lists the nodes whose incarnation cannot answer for off.
func (s *sim) bornAfter(off uint64) []int {
	var out []int
	for _, n := range s.nodes {
		if n.inc > 0 && n.birth > off {
			out = append(out, n.id)
		}
	}
	return out
}

// stuckForGood: some stripe at off can neither be decoded nor proven
// void while the nodes born after it cannot answer: with every other node
// heard it has fewer than k shards, and with the unknown ones it might
// have reached W.
func (s *sim) stuckForGood(off uint64) bool {
	unknown := s.bornAfter(off)
	if len(unknown) == 0 {
		return false
	}
	counts := map[stripe.ID]int{}
	for _, n := range s.nodes {
		if contains(unknown, n.id) {
			continue
		}
		if b, ok := n.disk[core.RangeStart(off)][off]; ok {
			if h, err := stripe.ParseHeader(b); err == nil {
				counts[h.ID]++
			}
		}
	}
	for _, c := range counts {
		if c < s.params.K && c+len(unknown) >= s.params.W {
			return true
		}
	}
	return false
}

// wipeStuck counts the in-doubt offsets r keeps that a wipe made
// unresolvable (no reader can settle them without repair).
func (s *sim) wipeStuck(r *reader) int {
	n := 0
	for off := range r.open {
		if s.stuckForGood(off) {
			n++
		}
	}
	return n
}

// wipeLost reports whether acked stripe id cannot be read any more: at
// every offset it was written, fewer than k nodes hold a shard of it.
func (s *sim) wipeLost(id stripe.ID) bool {
	if s.cfg.Wipes == 0 {
		return false
	}
	for _, off := range s.truth.offsets[id] {
		if len(s.holders(id, off)) >= s.params.K {
			return false
		}
	}
	return true
}

// keptInDoubt: reader r still holds the wipe-lost stripe acked at off in
// doubt (it never passed it as void or empty).
func (s *sim) keptInDoubt(r *reader, id stripe.ID) bool {
	off := s.truth.acked[id]
	return r.open[off] || r.r.Pos().Offset <= off
}
