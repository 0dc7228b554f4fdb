package core

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// Repair (DESIGN §6): the pure decisions of one node's repair loop for one
// partition where it holds ensemble position Pos. The repair actor scans a
// range's shard headers on every other node of the ensemble, reads its own
// slots, and asks PlanRange what to do; for each Fix it fetches k whole
// shards, calls RebuildShard and writes the result locally with the repair
// rules of Owner.RepairWrite. RepairSpans says which time to walk.

// ErrRebuild: a rebuilt shard does not match the stripe it was rebuilt from.
var ErrRebuild = errors.New("rebuilt shard does not match its stripe")

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
}

// Fix is one slot of this node that can be rebuilt.
type Fix struct {
	Offset uint64
	Group  stripe.ShardHeader // the decodable group (a peer's header; Index is that peer's)
	// Headers are the group's headers seen, by ensemble position (nil where
	// a peer had none of it, and at Pos).
	Headers []*stripe.ShardHeader
	// Sources are the positions holding the group, data shards first (a
	// decode from all k data shards needs no Reed-Solomon work).
	Sources []int
	Replace bool // this node holds a corrupt shard there
}

// RangePlan is the verdict on one scanned range [From, To).
type RangePlan struct {
	From, To uint64
	Fixes    []Fix
	// Holes: below Birth, offsets that may have held a committed shard of
	// this node and whose stripe no peer can rebuild; every peer answered
	// (young peers only regain shards of stripes decodable already), so
	// this will not change.
	Holes []uint64
	// Unresolved: offsets that may hold a committed stripe that cannot be
	// rebuilt yet, while some peer is unheard (try again later).
	Unresolved []uint64
	// Complete: every peer answered OK for the whole range.
	Complete bool
	// Resolved: once the fixes succeed, every offset below Birth in the
	// range is known: filled, void, or a hole. Fewer than W-1 peers are
	// not complete (else a committed stripe could hide entirely on them
	// and this node) and no offset is unresolved.
	Resolved bool
	// Settled: once the fixes succeed, nothing more in the range can ever
	// be rebuilt for this node: fewer than k peers are unheard, and no
	// offset missing here could become decodable even if every unheard
	// peer (and every peer with a bad header there) held a shard of its
	// stripe. (A young peer's page lists all it has; it only gains shards
	// of stripes that are decodable already.) A walk can leave a settled
	// range for good, though a peer is down.
	Settled bool
	// BelowN counts decodable stripes with fewer than n good shards.
	BelowN int
	// Ambiguous counts offsets with two decodable groups (never rebuilt).
	Ambiguous int
	// Corrupt lists bad entries: peers' headers that fail their checks and
	// this node's own shards (Node == Pos) that fail theirs.
	Corrupt []CorruptReport
	// Next is where a walk goes on after a probing scan of a Complete
	// range: the first occupied offset any peer has at or after To
	// (math.MaxUint64: none). Otherwise To.
	Next uint64
}

const (
	cellNone    = iota // absent
	cellGood           // a good shard (header) of the expected shape
	cellBad            // failed its checks
	cellForeign        // this node: a good shard that is not this position's (never overwritten)
)

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

// PlanRange decides what to do with [from, to) given this node's own
// slots there and the peers' answers. probe says the peers were asked for
// their next occupied offset (PeerScan.After).
func PlanRange(cfg RepairConfig, from, to uint64, local []LocalSlot, peers []PeerScan, probe bool) RangePlan {
	p := cfg.Params
	plan := RangePlan{From: from, To: to, Next: to}
	complete := make([]bool, p.N)
	heard := make([]bool, p.N)
	type cell struct {
		state uint8
		h     stripe.ShardHeader
	}
	rows := make(map[uint64][]cell)
	rowOf := func(off uint64) []cell {
		r, ok := rows[off]
		if !ok {
			r = make([]cell, p.N)
			rows[off] = r
		}
		return r
	}
	for _, ps := range peers {
		if ps.Node < 0 || ps.Node >= p.N || ps.Node == cfg.Pos || !ps.Heard {
			continue
		}
		complete[ps.Node], heard[ps.Node] = ps.Complete, true
		for _, e := range ps.Entries {
			if e.Offset < from || e.Offset >= to {
				continue
			}
			h, err := stripe.ParseHeader(e.Shard)
			if err == nil {
				err = checkPlace(p, &h, ps.Node, e.Offset)
			}
			c := &rowOf(e.Offset)[ps.Node]
			if err != nil {
				c.state = cellBad
				plan.Corrupt = append(plan.Corrupt, CorruptReport{Node: ps.Node, Offset: e.Offset, Err: err})
				continue
			}
			c.state, c.h = cellGood, h
		}
	}
	for _, e := range local {
		if e.Offset < from || e.Offset >= to {
			continue
		}
		c := &rowOf(e.Offset)[cfg.Pos]
		if e.Err == nil {
			if perr := checkPlace(p, &e.Header, cfg.Pos, e.Offset); perr != nil {
				c.state = cellForeign
				plan.Corrupt = append(plan.Corrupt, CorruptReport{Node: cfg.Pos, Offset: e.Offset, Err: perr})
				continue
			}
			c.state, c.h = cellGood, e.Header
			continue
		}
		c.state = cellBad
		plan.Corrupt = append(plan.Corrupt, CorruptReport{Node: cfg.Pos, Offset: e.Offset, Err: e.Err})
	}
	notComplete, unheard, unsettled := 0, 0, 0
	for i := range p.N {
		if i != cfg.Pos && !complete[i] {
			notComplete++
		}
		if i != cfg.Pos && !heard[i] {
			unheard++
		}
	}
	plan.Complete = notComplete == 0

	offsets := make([]uint64, 0, len(rows))
	for off := range rows {
		offsets = append(offsets, off)
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	for _, off := range offsets {
		row := rows[off]
		// Group the peers' good headers by stripe encoding.
		type group struct {
			ref     stripe.ShardHeader
			members []int
		}
		var groups []*group
		unknown := notComplete // peers that might hold a shard here unseen
		bad := 0
		for i, c := range row {
			if i == cfg.Pos {
				continue
			}
			switch c.state {
			case cellBad:
				bad++
				if complete[i] {
					unknown++
				}
				continue
			case cellNone:
				continue
			}
			var g *group
			for _, x := range groups {
				if x.ref.SameStripe(&row[i].h) {
					g = x
					break
				}
			}
			if g == nil {
				g = &group{ref: c.h}
				groups = append(groups, g)
			}
			g.members = append(g.members, i)
		}
		self := row[cfg.Pos]
		if self.state == cellGood || self.state == cellForeign {
			for _, g := range groups {
				if self.state == cellGood && g.ref.SameStripe(&self.h) && p.Decodable(len(g.members)+1) && len(g.members)+1 < p.N {
					plan.BelowN++
				}
			}
			continue
		}
		var decodable []*group
		maxSeen := 0
		for _, g := range groups {
			maxSeen = max(maxSeen, len(g.members))
			if p.Decodable(len(g.members)) {
				decodable = append(decodable, g)
			}
		}
		if len(decodable) == 1 {
			g := decodable[0]
			plan.BelowN++
			fix := Fix{Offset: off, Group: g.ref, Headers: make([]*stripe.ShardHeader, p.N), Replace: self.state == cellBad}
			for _, i := range g.members {
				h := row[i].h
				fix.Headers[i] = &h
			}
			// Data shards first, then parity, each in position order.
			for _, i := range g.members {
				if i < p.K {
					fix.Sources = append(fix.Sources, i)
				}
			}
			for _, i := range g.members {
				if i >= p.K {
					fix.Sources = append(fix.Sources, i)
				}
			}
			plan.Fixes = append(plan.Fixes, fix)
			continue
		}
		if len(decodable) == 0 && maxSeen+unheard+bad >= p.K {
			unsettled++ // decodable once the unheard peers answer, maybe
		}
		if len(decodable) > 1 {
			plan.Ambiguous++
		} else if maxSeen+unknown+1 < p.W {
			continue // void: no stripe can have been committed here
		}
		// A committed stripe may have had a shard here. If some peer is
		// unheard it may still show it; if every peer answered (young ones
		// included: they only ever regain shards of stripes decodable
		// already), that is final.
		switch {
		case unheard > 0:
			plan.Unresolved = append(plan.Unresolved, off)
		case off < cfg.Birth:
			plan.Holes = append(plan.Holes, off)
		}
	}
	plan.Resolved = notComplete+1 < p.W && len(plan.Unresolved) == 0
	plan.Settled = unheard < p.K && unsettled == 0
	if probe && plan.Complete {
		next := uint64(math.MaxUint64)
		for _, ps := range peers {
			if ps.Node != cfg.Pos && ps.Heard && ps.After != 0 {
				next = min(next, ps.After)
			}
		}
		plan.Next = max(next, to)
	}
	return plan
}

// checkPlace checks that a parsed header belongs at (node, off).
func checkPlace(p quorum.Params, h *stripe.ShardHeader, node int, off uint64) error {
	if int(h.Index) != node || h.Offset != off || int(h.N) != p.N || int(h.K) != p.K {
		return fmt.Errorf("%w: shard index %d offset %d n=%d k=%d stored at position %d offset %d (n=%d k=%d)",
			stripe.ErrCorruptShard, h.Index, h.Offset, h.N, h.K, node, off, p.N, p.K)
	}
	return nil
}

// RebuildShard rebuilds this node's shard of fix from fetched whole shards
// (marshalled, by ensemble position; at least k of the group) and proves
// it: every fetched shard must parse, belong to the group and re-encode to
// exactly its bytes, every header seen must match the re-encoding, and the
// rebuilt shard must carry the group's stripe id, shape and payload CRC.
// The result is byte-identical to the shard the producer sent (producers
// set no flags). Errors wrap ErrRebuild, stripe.ErrCorruptShard or
// stripe.ErrTooFewShards.
func RebuildShard(cfg RepairConfig, fix Fix, fetched map[int][]byte) ([]byte, error) {
	p := cfg.Params
	shards := make([]*stripe.Shard, p.N)
	have := 0
	for pos, raw := range fetched {
		if pos < 0 || pos >= p.N || pos == cfg.Pos {
			continue
		}
		s, err := stripe.Parse(raw)
		if err == nil {
			err = checkPlace(p, &s.ShardHeader, pos, fix.Offset)
		}
		if err == nil && !s.SameStripe(&fix.Group) {
			err = fmt.Errorf("%w: position %d holds stripe %s, not %s", ErrRebuild, pos, s.ID, fix.Group.ID)
		}
		if err != nil {
			return nil, fmt.Errorf("offset %d: fetched shard of position %d: %w", fix.Offset, pos, err)
		}
		shards[pos] = &s
		have++
	}
	if have < p.K {
		return nil, fmt.Errorf("offset %d: %w: %d fetched, k=%d", fix.Offset, stripe.ErrTooFewShards, have, p.K)
	}
	all, err := stripe.Rebuild(shards)
	if err != nil {
		return nil, fmt.Errorf("offset %d: %w", fix.Offset, err)
	}
	for pos, s := range shards {
		if s == nil {
			continue
		}
		re := all[pos]
		re.Flags = s.Flags
		if got := re.Marshal(); string(got) != string(fetched[pos]) {
			return nil, fmt.Errorf("offset %d: %w: position %d does not re-encode to its bytes", fix.Offset, ErrRebuild, pos)
		}
	}
	for pos, h := range fix.Headers {
		if h == nil || pos == cfg.Pos {
			continue
		}
		re := all[pos].ShardHeader
		re.Flags = h.Flags
		if re != *h {
			return nil, fmt.Errorf("offset %d: %w: header of position %d differs from the re-encoding", fix.Offset, ErrRebuild, pos)
		}
	}
	out := all[cfg.Pos]
	if out.ID != fix.Group.ID || out.PayloadCRC != fix.Group.PayloadCRC || out.PayloadLen != fix.Group.PayloadLen ||
		out.Offset != fix.Offset || int(out.Index) != cfg.Pos || out.Flags != 0 {
		return nil, fmt.Errorf("offset %d: %w: rebuilt shard %d of stripe %s", fix.Offset, ErrRebuild, out.Index, out.ID)
	}
	return out.Marshal(), nil
}

// SpanConfig says which time one partition's repair pass walks.
type SpanConfig struct {
	Created  uint64 // the topic's creation: nothing exists before it
	Birth    uint64 // Topic.BirthFor(incarnation birth); 0: no gap to fill
	Repaired uint64 // the repaired mark: the gap below it is filled
	// Verified is the end of the ranges a pass has verified contiguously
	// (every peer answered, nothing left to rebuild); 0: none yet.
	Verified uint64
	Floor    uint64 // retention: nothing below it is kept (dropped mark, now - retention)
	Window   int64  // the rolling window (ns)
	// CatchUp bounds how far back a restarted node resumes from Verified
	// (ns; 0: Window only).
	CatchUp int64
	// Horizon: only offsets older than now - Horizon are walked (D plus a
	// margin: every write there is over and every range sealed).
	Horizon int64
}

// Span is a stretch of time a pass walks. Gap: below the node's birth
// (the walk raises the repaired mark as it goes).
type Span struct {
	From, To uint64
	Gap      bool
}

// RepairSpans returns what a pass at now walks, in order: the gap below
// the node's birth not yet repaired (a young incarnation) and the rolling
// window of the recent past, resumed from Verified after a restart. A gap
// span's From can be above Repaired (the floor or the topic's creation):
// the caller raises the mark to it, nothing is kept below.
func RepairSpans(now int64, c SpanConfig) []Span {
	hz := uint64(max(now-c.Horizon, 0))
	low := max(c.Created, c.Floor)
	var out []Span
	gapEnd := uint64(0)
	if c.Birth > 0 {
		from, to := max(c.Repaired, low), min(c.Birth, hz)
		if from < to {
			out = append(out, Span{From: from, To: to, Gap: true})
		}
		gapEnd = to
	}
	from := uint64(max(now-c.Window, 0))
	if c.Verified > 0 && c.Verified < from {
		from = max(c.Verified, uint64(max(now-max(c.CatchUp, c.Window), 0)))
	}
	from = max(from, low, gapEnd)
	if from < hz {
		out = append(out, Span{From: from, To: hz})
	}
	return out
}

// StripeAt looks for stripe id at offset off in this node's slot and the
// peers' headers. It returns the
// positions holding good shards of its encoding (the first one found is
// the reference), and the positions heard (this node and every peer that
// answered). The stripe is decodable when len(members) >= k.
func StripeAt(cfg RepairConfig, off uint64, id stripe.ID, local []LocalSlot, peers []PeerScan) (ref stripe.ShardHeader, members, heard []int) {
	p := cfg.Params
	found := false
	add := func(pos int, h stripe.ShardHeader) {
		if h.ID != id || checkPlace(p, &h, pos, off) != nil {
			return
		}
		if !found {
			ref, found = h, true
		}
		if h.SameStripe(&ref) {
			members = append(members, pos)
		}
	}
	heard = append(heard, cfg.Pos)
	for _, e := range local {
		if e.Offset == off && e.Err == nil {
			add(cfg.Pos, e.Header)
		}
	}
	for _, ps := range peers {
		if ps.Node < 0 || ps.Node >= p.N || ps.Node == cfg.Pos || !ps.Heard {
			continue
		}
		heard = append(heard, ps.Node)
		for _, e := range ps.Entries {
			if e.Offset == off {
				if h, err := stripe.ParseHeader(e.Shard); err == nil {
					add(ps.Node, h)
				}
			}
		}
	}
	sort.Ints(members)
	sort.Ints(heard)
	return ref, members, heard
}

// RetentionCut is where retention by time cuts at now: the start of the
// owner range holding now - retention. Everything below it is older than
// the limit; the range holding the limit itself is kept whole.
func RetentionCut(now int64, retention int64) uint64 {
	return RangeStart(uint64(max(now-retention, 0)))
}
