package core

import (
	"fmt"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// Repair (docs/design.md#repair-and-scrub): the pure decisions of one node's repair loop for one
// partition where it holds ensemble position Pos. The repair actor scans a
// range's shard headers on every other node of the ensemble, reads its own
// slots, and asks PlanRange what to do; for each Fix it fetches k whole
// shards, calls RebuildShard and writes the result locally with the repair
// rules of Owner.RepairWrite. RepairSpans says which time to walk.
//
// This file holds the inputs every repair decision shares; the decisions
// are in repair_plan.go (PlanRange), repair_rebuild.go (RebuildShard),
// repair_spans.go (RepairSpans), repair_walk.go (RepairWalk) and
// repair_stripe_at.go (StripeAt).

// RepairConfig is one node's repair rules for one partition.
type RepairConfig struct {
	Params quorum.Params
	Pos    int // this node's ensemble position
	// Birth is the node's incarnation birth as it matters for the topic
	// (Topic.BirthFor; 0: the node has seen the whole topic). Below it an
	// offset that may have held a committed shard nobody can rebuild is a
	// hole (the node answers "unknown" there for good).
	Birth uint64
}

// PeerScan is another node's answer to a (headers-only) scan of a range.
type PeerScan struct {
	Node  int  // ensemble position
	Heard bool // every page answered, OK or UNKNOWN
	// Complete: every page answered OK, so an absent offset is empty there
	// (a young incarnation's UNKNOWN page lists what it has, but absence
	// proves nothing).
	Complete bool
	Entries  []Entry // shard headers (or whole shards)
	After    uint64  // with a probe: the node's first occupied offset >= the scan's end (0: none)
	// Clock is the node's clock (unix ns) in its last reply; 0 if unheard.
	Clock int64
}

// LocalSlot is one of this node's own slots as its store holds it: the
// shard's header, or the error its checks (stripe.Parse: both CRCs) failed
// with. CheckLocal makes one from the stored bytes.
type LocalSlot struct {
	Offset uint64
	Header stripe.ShardHeader // valid when Err is nil
	Err    error
}

// CheckLocal checks a stored shard (both CRCs) and keeps its header.
func CheckLocal(off uint64, b []byte) LocalSlot {
	s, err := stripe.Parse(b)
	return LocalSlot{Offset: off, Header: s.ShardHeader, Err: err}
}

// checkPlace checks that a parsed header belongs at (node, off).
func checkPlace(p quorum.Params, h *stripe.ShardHeader, node int, off uint64) error {
	if int(h.Index) != node || h.Offset != off || int(h.N) != p.N || int(h.K) != p.K {
		return fmt.Errorf("%w: shard index %d offset %d n=%d k=%d stored at position %d offset %d (n=%d k=%d)",
			stripe.ErrCorruptShard, h.Index, h.Offset, h.N, h.K, node, off, p.N, p.K)
	}
	return nil
}
