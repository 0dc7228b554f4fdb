package sim

import (
	"cmp"
	"slices"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// check runs every end-of-run property check and fills the counts.
// (Write-once, a reborn node's answers below its birth, revoke before
// assign and the group's commit cap are checked as they happen: node.go,
// wipe.go, group_check.go.)
func (s *sim) check() {
	s.tally()
	for _, r := range s.readers {
		s.checkReader(r)
	}
	s.checkInDoubt() // before checkAckedDelivered: an acked stripe given up on explains its loss
	s.checkAckedDelivered()
	s.checkProgress()
	s.checkSameSequence()
	s.checkAckedDurable()
	s.checkRepaired()
	s.checkSettled()
	s.checkGrid() // grid.go
	s.checkLease()
	s.checkKafka()
	s.checkGroup()
	s.res.KVCalls, s.res.KVFailed = s.kv.calls, s.kv.failed
}

func (s *sim) tally() {
	s.res.Acked, s.res.Failed = len(s.truth.acked), len(s.truth.failed)
	for id := range s.truth.acked {
		s.res.AckedRecords += len(s.truth.values[id])
	}
	for _, r := range s.readers {
		s.res.Delivered = append(s.res.Delivered, len(r.got))
	}
}

// checkReader: every delivered record was sent, as part of the stripe the
// reader names, once, and positions only go forward, from where each
// incarnation resumed; a late record (from a deferred in-doubt offset) may
// go back, but not before that resume point. The exception to "once": a
// restarted reader has lost its dedupe memory and may resume below what
// it delivered (at its low water), so it may deliver a stripe again, at
// the same offset or at another copy; subscribers dedupe by stripe id
// (§8). r.view is what they keep.
func (s *sim) checkReader(r *reader) {
	first := map[string]delivered{}
	var last *core.Position
	inc := 0
	for i, d := range r.got {
		if id, ok := s.truth.byValue[d.value]; !ok || id != d.id {
			s.violate("r%d delivered %q (stripe %s) that was never sent", r.id, d.value, sid(d.id))
		}
		if d.inc != inc {
			inc, last = d.inc, nil
		}
		switch from := r.resumes[d.inc]; {
		case d.pos.Less(from):
			s.violate("r%d delivered %q at %s, before %s where incarnation #%d started", r.id, d.value, s.log.pos(d.pos), s.log.pos(from), d.inc)
		case d.late:
		case last != nil && !last.Less(d.pos):
			s.violate("r%d delivered %q at %s, not after %s", r.id, d.value, s.log.pos(d.pos), s.log.pos(*last))
		default:
			last = &r.got[i].pos
		}
		prev, dup := first[d.value]
		switch {
		case !dup:
			first[d.value] = d
			r.view = append(r.view, d)
		case prev.inc < d.inc:
			if d.pos.Index == 0 {
				s.res.Redelivered++
			}
		default:
			s.violate("r%d delivered %q twice (at %s, then %s)", r.id, d.value, s.log.pos(prev.pos), s.log.pos(d.pos))
		}
	}
}

// checkAckedDelivered: every record of every acked stripe reached every
// reader (all of them are live at the end: a restarted one resumes), at
// the acked offset or at another copy of the stripe ("moved"), once or,
// across a restart, again ("redelivered"): r.view is what a subscriber
// keeps. This holds through every fault kind, quorum loss included: its
// readers must wait for the nodes to return. The one exception is a stripe
// a wipe left with fewer than k shards anywhere (wipe.go): no reader can
// decode it without repair, so a reader must keep it in doubt instead.
func (s *sim) checkAckedDelivered() {
	for _, r := range s.readers {
		got := map[string]bool{}
		for _, d := range r.view {
			got[d.value] = true
		}
		for _, id := range sortedIDs(s.truth.acked) {
			for _, v := range s.truth.values[id] {
				if !got[v] && s.wipeLost(id) {
					if s.keptInDoubt(r, id) {
						s.res.WipeLost++
						break
					}
					off := s.truth.acked[id]
					s.violate("%s passed %s (acked at %s), which a wipe left with %d shards, without keeping it in doubt (did a node born after it answer empty?)",
						r.name, sid(id), s.log.off(off), len(s.holders(id, off)))
					break
				}
				if !got[v] {
					off := s.truth.acked[id]
					s.violate("r%d never delivered %q of %s, acked at %s (durable on n%s)",
						r.id, v, sid(id), s.log.off(off), nodeList(s.holders(id, off)))
					break
				}
			}
		}
	}
}

// holders lists the nodes whose current incarnation has a durable shard
// of id at off.
func (s *sim) holders(id stripe.ID, off uint64) []int {
	var out []int
	for _, n := range s.nodes {
		if b, ok := n.disk[core.RangeStart(off)][off]; ok {
			if h, err := stripe.ParseHeader(b); err == nil && h.ID == id {
				out = append(out, n.id)
			}
		}
	}
	return out
}

// checkSameSequence: every reader delivered the same records at the same
// positions as reader 0, except for "moved" stripes: a stripe committed at two
// offsets (a retry that landed twice) may be delivered at the later copy by
// a reader that found the earlier one in doubt, since docs/design.md#read-path skips an
// in-doubt group whose copy is decodable later without waiting. Each such
// offset must really hold an attempt of that stripe. Stripes a wipe left
// unreadable are left out too: readers before the wipe delivered them,
// readers after it keep them in doubt (wipe.go).
func (s *sim) checkSameSequence() {
	moved := s.movedStripes()
	s.res.Moved = len(moved)
	seqs := make([][]delivered, len(s.readers))
	for i, r := range s.readers {
		for _, d := range r.view {
			if !moved[d.id] && !s.wipeLost(d.id) { // a reader after the wipe keeps it in doubt
				seqs[i] = append(seqs[i], d)
			}
		}
		// In position order: a late record takes its place (the
		// in-order ones are in position order already, checkReader).
		slices.SortStableFunc(seqs[i], func(a, b delivered) int { return cmpPos(a.pos, b.pos) })
	}
	for i := 1; i < len(seqs); i++ {
		a, b := seqs[0], seqs[i]
		for j := range max(len(a), len(b)) {
			if j >= len(a) || j >= len(b) || a[j].value != b[j].value {
				s.violate("r0 and r%d differ at delivery %d (moved stripes aside): %s vs %s",
					i, j, describe(s, a, j), describe(s, b, j))
				break
			}
		}
	}
}

// movedStripes finds the stripes readers delivered at different offsets
// and checks that each offset held an attempt of the stripe.
func (s *sim) movedStripes() map[stripe.ID]bool {
	at := map[stripe.ID][]uint64{}
	for _, r := range s.readers {
		for _, d := range r.view {
			if d.pos.Index == 0 && !slices.Contains(at[d.id], d.pos.Offset) {
				at[d.id] = append(at[d.id], d.pos.Offset)
			}
		}
	}
	moved := map[stripe.ID]bool{}
	for _, id := range sortedIDs(at) {
		if len(at[id]) < 2 {
			continue
		}
		moved[id] = true
		s.log.add("moved: %s delivered at %d offsets", sid(id), len(at[id]))
		for _, off := range at[id] {
			if !slices.Contains(s.truth.offsets[id], off) {
				s.violate("%s delivered at %s where it was never written", sid(id), s.log.off(off))
			}
		}
	}
	return moved
}

func describe(s *sim, ds []delivered, i int) string {
	if i >= len(ds) {
		return "(end)"
	}
	return sprintf("%q %s", ds[i].value, s.log.pos(ds[i].pos))
}

// checkAckedDurable: an acked stripe has W durable shards at its offset
// (counting those a wipe took since).
func (s *sim) checkAckedDurable() {
	for _, id := range sortedIDs(s.truth.acked) {
		off := s.truth.acked[id]
		have := len(s.holders(id, off))
		for _, n := range s.nodes {
			if b, ok := n.past[off]; ok && !contains(s.holders(id, off), n.id) {
				if h, err := stripe.ParseHeader(b); err == nil && h.ID == id {
					have++
				}
			}
		}
		if !s.params.Committed(have) {
			s.violate("%s acked at %s but only %d shards are durable there", sid(id), s.log.off(off), have)
		}
	}
}

// checkSettled: every stripe sent was either acked or failed.
func (s *sim) checkSettled() {
	for _, id := range sortedIDs(s.truth.values) {
		_, acked := s.truth.acked[id]
		_, failed := s.truth.failed[id]
		if !acked && !failed {
			s.violate("%s was neither acked nor failed", sid(id))
		}
		if !failed || !s.cfg.ExpectNoFailures {
			continue
		}
		if s.failureExcused(id, s.truth.failed[id]) {
			continue
		}
		s.violate("liveness: %s failed within the fault model: %v", sid(id), s.truth.failed[id])
	}
}

// sortedIDs lists a map's stripe ids in (producer, seq) order.
func sortedIDs[V any](m map[stripe.ID]V) []stripe.ID {
	ids := make([]stripe.ID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b stripe.ID) int {
		if c := cmp.Compare(a.Producer[0], b.Producer[0]); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	return ids
}

func cmpPos(a, b core.Position) int {
	if c := cmp.Compare(a.Offset, b.Offset); c != 0 {
		return c
	}
	return cmp.Compare(a.Index, b.Index)
}
