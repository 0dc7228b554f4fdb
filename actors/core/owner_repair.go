package core

import (
	"fmt"
	"sort"

	"github.com/raidq/raidq/stripe"
)

// Repair rules of the slot owner (docs/design.md#slot-store incarnation, §6 repair).

// SetRepaired tells the owner how far repair has filled the time before
// the node's birth: below upTo every slot this incarnation may have missed
// is filled, except at holes (offsets whose stripe repair could not
// rebuild and that may have held a committed shard). Scans of [upTo,
// Birth) or of a hole answer "unknown"; the rest of the range normally.
// holes may be the whole partition's (sorted); only the range's matter.
func (o *Owner) SetRepaired(upTo uint64, holes []uint64) {
	o.repaired = upTo
	o.holes = o.holes[:0]
	for _, h := range holes {
		if h >= o.cfg.Lo && h < o.Hi() {
			o.holes = append(o.holes, h)
		}
	}
}

// unknown reports whether the node cannot say "empty" somewhere in
// [from, to): it overlaps [repaired, Birth), or holds a hole.
func (o *Owner) unknown(from, to uint64) bool {
	if max(from, o.repaired) < min(to, o.cfg.Birth) {
		return true
	}
	i := sort.Search(len(o.holes), func(i int) bool { return o.holes[i] >= from })
	return i < len(o.holes) && o.holes[i] < to
}

// Occupied reports whether the owner counts slot off as occupied (the
// store may still have it in the commit queue).
func (o *Owner) Occupied(off uint64) bool {
	_, ok := o.slots[off]
	return ok
}

// RepairWrite decides a write of shard h at off by the node's own repair
// loop, which has rebuilt h from k shards of a decodable group and checked
// that it re-encodes to that group. corrupt says the actor read the slot
// and its bytes fail their checks (only meaningful for an occupied slot).
// The rules:
//
//   - an empty slot takes the shard at any age: below the seal, outside
//     the accept window and before the node's birth (the repair's point);
//     only the future bound still applies;
//   - a corrupt slot is replaced (Decision.Replace);
//   - the same shard already there (same stripe, index and data CRC):
//     OK, after a barrier, as for a producer's retry;
//   - a different good shard: CONFLICT (write-once holds for repair too);
//   - an offset off the topic's grid: BAD_REQUEST (it cannot hold a shard).
func (o *Owner) RepairWrite(now int64, off uint64, h *stripe.ShardHeader, corrupt bool) WriteDecision {
	o.checkRouted("repair write", off)
	if off < o.cfg.Lo || off >= o.Hi() || h.Offset != off {
		return WriteDecision{Status: StatusBadRequest,
			Detail: fmt.Sprintf("repair of offset %d (shard says %d) outside owner range [%d,%d)", off, h.Offset, o.cfg.Lo, o.Hi())}
	}
	// A rebuilt shard repeats shards its peers accepted, so it is on the
	// grid; one that is not shows a bug, or a peer that took a write off
	// the grid, and is refused rather than spread.
	if d, bad := o.gridCheck(off, "repair"); bad {
		return d
	}
	info := SlotInfo{ID: h.ID, Index: h.Index, DataCRC: h.DataCRC}
	if cur, ok := o.slots[off]; ok {
		switch {
		case corrupt:
			o.slots[off] = info
			return WriteDecision{Status: StatusOK, Persist: true, Replace: true}
		case cur == info:
			return WriteDecision{Status: StatusOK, Barrier: true}
		}
		return WriteDecision{Status: StatusConflict, Detail: fmt.Sprintf("slot %d holds stripe %s shard %d", off, cur.ID, cur.Index)}
	}
	if int64(off) > now+o.cfg.Future {
		return WriteDecision{Status: StatusClockAhead, Detail: fmt.Sprintf("repair of offset %d ahead of node clock %d plus future bound", off, now)}
	}
	o.slots[off] = info
	return WriteDecision{Status: StatusOK, Persist: true}
}
