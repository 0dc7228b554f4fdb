package core

import (
	"fmt"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/invariants"
)

// RangeNanos is the width of one slot-owner's offset range: one second of
// one partition. Scans never cross a range boundary, so each scan is served
// (and seals) within a single owner.
const RangeNanos uint64 = 1_000_000_000

// RangeStart returns the start of the owner range holding offset.
func RangeStart(offset uint64) uint64 { return offset - offset%RangeNanos }

// SlotInfo is what an owner remembers of one occupied slot.
type SlotInfo struct {
	ID      stripe.ID
	Index   uint8
	DataCRC uint32
}

// OwnerConfig fixes one owner's range and timing rules.
type OwnerConfig struct {
	Topic     string
	Partition uint32
	Lo        uint64 // first offset of the range (RangeStart)
	Accept    int64  // A in ns: offsets older than now-A are refused
	Future    int64  // F in ns: offsets newer than now+F are refused
	Birth     uint64 // the node's incarnation birth: offsets before it are "unknown" to scans
	// Grid is the topic's offset grid (quorum.Params.Grid; 0 or 1: none).
	// Writes off it are refused (docs/design.md#kafka-offsets).
	Grid uint64
}

// Owner is the write-once logic of one range of slots on one node. It is
// owned by exactly one slot-owner actor, which serializes every write and
// scan for the range; that single-threadedness is what makes check-then-
// insert race free.
type Owner struct {
	cfg   OwnerConfig
	seal  uint64
	slots map[uint64]SlotInfo
	// floor: the node's clock floor (ClockFloor.Used, RaiseFloor): writes
	// older than floor - A are refused even if the clock reads earlier,
	// because a closing scan may have promised a reader so.
	floor int64
	// What repair has filled below the birth (SetRepaired, owner_repair.go).
	repaired uint64
	holes    []uint64
}

// NewOwner rebuilds an owner from the store: its persisted seal and the
// slots already present in the range.
func NewOwner(cfg OwnerConfig, seal uint64, existing map[uint64]SlotInfo) *Owner {
	if existing == nil {
		existing = make(map[uint64]SlotInfo)
	}
	return &Owner{cfg: cfg, seal: seal, slots: existing}
}

// Hi is one past the last offset of the range.
func (o *Owner) Hi() uint64 { return o.cfg.Lo + RangeNanos }

// Seal is the offset below which the range accepts no new write.
func (o *Owner) Seal() uint64 { return o.seal }

// RaiseFloor raises the owner's clock floor to the node's (ClockFloor.Used).
// The driver calls it before every Write and Close; it never lowers.
func (o *Owner) RaiseFloor(floor int64) { o.floor = max(o.floor, floor) }

// Accept is the owner's accept window A in ns (OwnerConfig.Accept).
func (o *Owner) Accept() int64 { return o.cfg.Accept }

// Len is the number of occupied slots.
func (o *Owner) Len() int { return len(o.slots) }

// WriteDecision says how to answer a write and whether to persist it first.
type WriteDecision struct {
	Status Status
	// Persist: the shard must be made durable before replying Status (OK).
	Persist bool
	// Barrier: the same shard was accepted earlier and may still be in the
	// group-commit queue; reply only after the queue drains up to here.
	Barrier bool
	// Replace (repair writes only): the slot holds a corrupt shard that
	// the new one overwrites (slotstore Batch.ReplaceCorrupt).
	Replace bool
	Detail  string
}

// Write decides one write of shard h at offset off, at node time now.
// On StatusOK with Persist the slot counts as occupied from this call on,
// so a racing write sees CONFLICT even before the store has synced.
func (o *Owner) Write(now int64, off uint64, h *stripe.ShardHeader, repair bool) WriteDecision {
	o.checkRouted("write", off)
	if off < o.cfg.Lo || off >= o.Hi() || h.Offset != off {
		return WriteDecision{Status: StatusBadRequest,
			Detail: fmt.Sprintf("offset %d (shard says %d) outside owner range [%d,%d)", off, h.Offset, o.cfg.Lo, o.Hi())}
	}
	if d, bad := o.gridCheck(off, "write"); bad {
		return d
	}
	if cur, ok := o.slots[off]; ok {
		if cur.ID == h.ID && cur.Index == h.Index && cur.DataCRC == h.DataCRC {
			return WriteDecision{Status: StatusOK, Barrier: true}
		}
		return WriteDecision{Status: StatusConflict, Detail: fmt.Sprintf("slot %d holds stripe %s shard %d", off, cur.ID, cur.Index)}
	}
	if repair {
		// Repair writes go below the seal only after the node's own repair
		// loop has proved that the bytes re-encode to the committed stripe
		// (docs/design.md#repair-and-scrub); they reach the owner as RepairWrite, never from the
		// wire, where the flag is refused.
		return WriteDecision{Status: StatusBadRequest, Detail: "repair writes are accepted only from the node's own repair loop"}
	}
	if d, bad := o.timeCheck(now, off); bad {
		return d
	}
	o.slots[off] = SlotInfo{ID: h.ID, Index: h.Index, DataCRC: h.DataCRC}
	return WriteDecision{Status: StatusOK, Persist: true}
}

// checkRouted asserts the routing the driver guarantees: a request at
// offset off reached the owner of RangeStart(off), the one range holding
// it (the node's partition actor and the simulation route so, and the
// reader's scans start in the range they end in: checkScan). This is
// apart from the checks of client input (an offset that disagrees with
// its shard, a scan empty or past the range's end), which stay answers.
// With invariants off (the released binary) a routing violation is
// answered BAD_REQUEST like bad input, as before.
func (o *Owner) checkRouted(what string, off uint64) {
	if invariants.Enabled && (off < o.cfg.Lo || off >= o.Hi()) {
		invariants.Failf("owner %s/%d [%d,%d): %s at offset %d routed to the wrong owner (the driver routes by RangeStart)",
			o.cfg.Topic, o.cfg.Partition, o.cfg.Lo, o.Hi(), what, off)
	}
}

// gridCheck refuses an offset off the topic's grid with BAD_REQUEST: a
// stripe there would break the Kafka offset mapping (offset + record
// index), and no write or retry could ever succeed there, so a producer
// that ignores the grid (one older than it) fails loudly rather than
// storing what Kafka clients could not be served.
func (o *Owner) gridCheck(off uint64, what string) (WriteDecision, bool) {
	if off%max(o.cfg.Grid, 1) == 0 {
		return WriteDecision{}, false
	}
	return WriteDecision{Status: StatusBadRequest, Detail: fmt.Sprintf(
		"%s at offset %d off the topic's offset grid of %d ns: offsets must be multiples of it (a producer older than the grid?)",
		what, off, o.cfg.Grid)}, true
}

// timeCheck applies the seal, the accept window and the future bound.
func (o *Owner) timeCheck(now int64, off uint64) (WriteDecision, bool) {
	switch {
	case off < o.seal:
		return WriteDecision{Status: StatusSealed, Detail: fmt.Sprintf("offset %d below seal %d", off, o.seal)}, true
	case int64(off) < now-o.cfg.Accept:
		return WriteDecision{Status: StatusSealed, Detail: fmt.Sprintf("offset %d older than node clock %d minus accept window", off, now)}, true
	case int64(off) < o.floor-o.cfg.Accept:
		return WriteDecision{Status: StatusSealed, Detail: fmt.Sprintf("offset %d older than the node's clock floor %d minus accept window (closed for readers)", off, o.floor)}, true
	case int64(off) > now+o.cfg.Future:
		return WriteDecision{Status: StatusClockAhead, Detail: fmt.Sprintf("offset %d ahead of node clock %d plus future bound", off, now)}, true
	case off < o.cfg.Birth:
		return WriteDecision{Status: StatusSealed, Detail: fmt.Sprintf("offset %d before this node's incarnation %d", off, o.cfg.Birth)}, true
	}
	return WriteDecision{}, false
}

// ScanDecision says how to carry out a scan.
type ScanDecision struct {
	Status Status
	Detail string
	// PersistSeal: the raised seal must be durable before the scan reads
	// (so a restarted node keeps refusing writes the reader skipped).
	PersistSeal bool
	Seal        uint64
	// Unknown: part of [from,to) predates the node's incarnation and
	// repair has not filled it yet (or left a hole there); the node cannot
	// say "empty" there.
	Unknown bool
	// Closed (Close only): the node takes no new write below it in the
	// range; the scan answers the slots of [from, Closed).
	Closed uint64
}

// Scan decides a scan of [from, to). With seal it first raises the seal to
// to, so no write lands in the scanned range afterwards. A reader whose
// clock runs ahead of the node's may not seal the node's future.
func (o *Owner) Scan(now int64, from, to uint64, seal bool) ScanDecision {
	o.checkRouted("scan", from)
	if from >= to || from < o.cfg.Lo || to > o.Hi() {
		return ScanDecision{Status: StatusBadRequest,
			Detail: fmt.Sprintf("scan [%d,%d) must be non-empty and inside owner range [%d,%d)", from, to, o.cfg.Lo, o.Hi())}
	}
	d := ScanDecision{Status: StatusOK, Seal: o.seal, Unknown: o.unknown(from, to)}
	if seal && to > o.seal {
		if int64(to) > now {
			return ScanDecision{Status: StatusClockAhead, Seal: o.seal,
				Detail: fmt.Sprintf("cannot seal up to %d: node clock is %d", to, now)}
		}
		o.seal = to
		d.Seal, d.PersistSeal = to, true
	}
	return d
}

// Close decides a closing scan of [from, to), the read frontier's node half
// (docs/design.md#the-read-frontier). The node closes what it already
// refuses, writing nothing: Closed = min(to, max(seal, clock - A)), where
// clock is the node's close clock (ClockFloor.CloseClock: its clock,
// bounded by the durable floor). The owner's floor rises to clock, so no
// write lands below Closed afterwards, and the driver answers the slots
// of [from, Closed) (none when Closed <= from). Unlike a sealing scan it
// never refuses for a reader's fast clock and costs no store write: a
// reader asking too far only gets less.
func (o *Owner) Close(clock int64, from, to uint64) ScanDecision {
	o.checkRouted("closing scan", from)
	if from >= to || from < o.cfg.Lo || to > o.Hi() {
		return ScanDecision{Status: StatusBadRequest,
			Detail: fmt.Sprintf("scan [%d,%d) must be non-empty and inside owner range [%d,%d)", from, to, o.cfg.Lo, o.Hi())}
	}
	o.RaiseFloor(clock)
	closed := o.seal
	if c := o.floor - o.cfg.Accept; c > 0 {
		closed = max(closed, uint64(c))
	}
	closed = max(min(closed, to), from)
	d := ScanDecision{Status: StatusOK, Seal: o.seal, Closed: closed}
	if closed > from {
		d.Unknown = o.unknown(from, closed)
	}
	return d
}
