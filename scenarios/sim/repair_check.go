package sim

import (
	"fmt"
	"slices"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// The checks of the shipped repair loop (repair.go says what it is and
// what these check): the proof check of every shard it writes
// (checkRebuilt), the write-once check of repair writes within a node's
// life (repairAccepted; node.store checks durable slots), and, after the
// final passes, every acked stripe back to n shards (checkRepaired). The
// owners' view of the repaired mark (refreshRepaired), the void offsets a
// reborn node may answer for (repairedVoid) and the progress bound's
// holders (heldFirst) follow the durable marks.

// refreshRepaired gives a reborn node's owner the repaired mark and holes
// before a scan (the owner actor's refreshRepaired).
func (s *sim) refreshRepaired(n *node, o *core.Owner) {
	if s.repair == nil {
		return
	}
	r := s.repair.nodes[n.id]
	r.sync()
	if n.birth <= s.topicCreated() {
		return // Topic.BirthFor: the node has seen the whole topic
	}
	o.SetRepaired(r.repaired, r.holes)
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

// repairedVoid: with repair, a reborn node may answer for an offset its
// earlier incarnation held once its walk settled it (below the repaired
// mark, not a hole) and the stripe there could not have been committed:
// with this node's old shard it has fewer than W (PlanRange's void).
func (s *sim) repairedVoid(n *node, off uint64) bool {
	if s.repair == nil {
		return false
	}
	r := s.repair.nodes[n.id]
	r.sync()
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
