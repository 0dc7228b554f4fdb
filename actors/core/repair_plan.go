package core

import (
	"math"
	"sort"

	"github.com/raidq/raidq/stripe"
)

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

// PlanRange decides what to do with [from, to) given this node's own
// slots there and the peers' answers. probe says the peers were asked for
// their next occupied offset (PeerScan.After).
func PlanRange(cfg RepairConfig, from, to uint64, local []LocalSlot, peers []PeerScan, probe bool) RangePlan {
	pl := newRangePlanner(cfg, from, to)
	pl.addPeers(peers)
	pl.addLocal(local)
	pl.countPeers()
	for _, off := range pl.offsets() {
		pl.planOffset(off, pl.rows[off])
	}
	p := cfg.Params
	pl.plan.Resolved = pl.notComplete+1 < p.W && len(pl.plan.Unresolved) == 0
	pl.plan.Settled = pl.unheard < p.K && pl.unsettled == 0
	if probe && pl.plan.Complete {
		pl.plan.Next = nextOccupied(cfg.Pos, peers, to)
	}
	return pl.plan
}

// planCell is what PlanRange knows of one position's slot at one offset:
// its state (cellNone, cellGood, cellBad, cellForeign) and, when good or
// foreign, the shard's header.
type planCell struct {
	state uint8
	h     stripe.ShardHeader
}

// rangePlanner is PlanRange's working state for one range: the plan being
// built, one row of cells (by ensemble position) per offset anything was
// seen at, which peers answered (heard) and answered OK for the whole
// range (complete), and the counts the verdicts need.
type rangePlanner struct {
	cfg      RepairConfig
	from, to uint64
	plan     RangePlan
	rows     map[uint64][]planCell
	complete []bool // by ensemble position
	heard    []bool // by ensemble position
	// notComplete and unheard count the peers (never Pos) that are not
	// complete, not heard (countPeers).
	notComplete, unheard int
	// unsettled counts offsets missing here that could become decodable
	// once the unheard peers answer.
	unsettled int
}

func newRangePlanner(cfg RepairConfig, from, to uint64) *rangePlanner {
	return &rangePlanner{
		cfg:      cfg,
		from:     from,
		to:       to,
		plan:     RangePlan{From: from, To: to, Next: to},
		rows:     make(map[uint64][]planCell),
		complete: make([]bool, cfg.Params.N),
		heard:    make([]bool, cfg.Params.N),
	}
}

// rowOf returns the row of off, creating an empty one (every cell
// cellNone) the first time.
func (pl *rangePlanner) rowOf(off uint64) []planCell {
	r, ok := pl.rows[off]
	if !ok {
		r = make([]planCell, pl.cfg.Params.N)
		pl.rows[off] = r
	}
	return r
}

// addPeers records the answers of the heard peers (answers from Pos or
// from outside the ensemble are ignored; a later answer of the same peer
// wins): which peers are heard and complete, and for each of their
// entries in [from, to) a good cell, or a bad one, reported corrupt, when
// the header does not parse or does not belong at (peer, offset).
func (pl *rangePlanner) addPeers(peers []PeerScan) {
	p := pl.cfg.Params
	for _, ps := range peers {
		if ps.Node < 0 || ps.Node >= p.N || ps.Node == pl.cfg.Pos || !ps.Heard {
			continue
		}
		pl.complete[ps.Node], pl.heard[ps.Node] = ps.Complete, true
		for _, e := range ps.Entries {
			if e.Offset < pl.from || e.Offset >= pl.to {
				continue
			}
			h, err := stripe.ParseHeader(e.Shard)
			if err == nil {
				err = checkPlace(p, &h, ps.Node, e.Offset)
			}
			c := &pl.rowOf(e.Offset)[ps.Node]
			if err != nil {
				c.state = cellBad
				pl.plan.Corrupt = append(pl.plan.Corrupt, CorruptReport{Node: ps.Node, Offset: e.Offset, Err: err})
				continue
			}
			c.state, c.h = cellGood, h
		}
	}
}

// addLocal records this node's own slots in [from, to) at Pos: a good
// cell for a good shard of this position; a foreign one (reported corrupt,
// never overwritten) for a good shard that does not belong here; a bad one
// (reported corrupt) for a shard that failed its checks. Called after
// addPeers: the reports of this node come after the peers'.
func (pl *rangePlanner) addLocal(local []LocalSlot) {
	pos := pl.cfg.Pos
	for _, e := range local {
		if e.Offset < pl.from || e.Offset >= pl.to {
			continue
		}
		c := &pl.rowOf(e.Offset)[pos]
		if e.Err == nil {
			if perr := checkPlace(pl.cfg.Params, &e.Header, pos, e.Offset); perr != nil {
				c.state = cellForeign
				pl.plan.Corrupt = append(pl.plan.Corrupt, CorruptReport{Node: pos, Offset: e.Offset, Err: perr})
				continue
			}
			c.state, c.h = cellGood, e.Header
			continue
		}
		c.state = cellBad
		pl.plan.Corrupt = append(pl.plan.Corrupt, CorruptReport{Node: pos, Offset: e.Offset, Err: e.Err})
	}
}

// countPeers counts the peers that are not complete and not heard (after
// addPeers), and sets plan.Complete: no peer is not complete.
func (pl *rangePlanner) countPeers() {
	for i := range pl.cfg.Params.N {
		if i != pl.cfg.Pos && !pl.complete[i] {
			pl.notComplete++
		}
		if i != pl.cfg.Pos && !pl.heard[i] {
			pl.unheard++
		}
	}
	pl.plan.Complete = pl.notComplete == 0
}

// offsets returns the offsets with a row, ascending (so fixes, holes and
// unresolved offsets come out in offset order).
func (pl *rangePlanner) offsets() []uint64 {
	offsets := make([]uint64, 0, len(pl.rows))
	for off := range pl.rows {
		offsets = append(offsets, off)
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	return offsets
}

// planGroup is the peers holding good shards of one stripe encoding at
// one offset (ref is the first one's header).
type planGroup struct {
	ref     stripe.ShardHeader
	members []int // ensemble positions, ascending
}

// rowGroups groups the peers' good cells of row by stripe encoding
// (SameStripe with a group's first member), groups in order of their first
// member's position; Pos is skipped. bad counts the peers whose cell failed
// its checks, badComplete those of them that are complete (the bad entry
// may hide a shard there).
func (pl *rangePlanner) rowGroups(row []planCell) (groups []*planGroup, bad, badComplete int) {
	for i, c := range row {
		if i == pl.cfg.Pos {
			continue
		}
		switch c.state {
		case cellBad:
			bad++
			if pl.complete[i] {
				badComplete++
			}
			continue
		case cellNone:
			continue
		}
		var g *planGroup
		for _, x := range groups {
			if x.ref.SameStripe(&row[i].h) {
				g = x
				break
			}
		}
		if g == nil {
			g = &planGroup{ref: c.h}
			groups = append(groups, g)
		}
		g.members = append(g.members, i)
	}
	return groups, bad, badComplete
}

// planOffset adds the verdict on one offset to the plan: nothing to do
// where this node holds a good shard (held); a Fix where exactly one
// stripe is decodable from the peers; otherwise, where a committed stripe
// may have had a shard here, an unresolved offset or a hole (missing).
func (pl *rangePlanner) planOffset(off uint64, row []planCell) {
	groups, bad, badComplete := pl.rowGroups(row)
	self := row[pl.cfg.Pos]
	if self.state == cellGood || self.state == cellForeign {
		pl.held(self, groups)
		return
	}
	var decodable []*planGroup
	maxSeen := 0
	for _, g := range groups {
		maxSeen = max(maxSeen, len(g.members))
		if pl.cfg.Params.Decodable(len(g.members)) {
			decodable = append(decodable, g)
		}
	}
	if len(decodable) == 1 {
		pl.plan.BelowN++
		pl.plan.Fixes = append(pl.plan.Fixes, pl.fix(off, row, decodable[0], self.state == cellBad))
		return
	}
	unknown := pl.notComplete + badComplete // peers that might hold a shard here unseen
	pl.missing(off, len(decodable), maxSeen, bad, unknown)
}

// held counts, where this node holds a good shard of its position (self),
// the groups of its stripe that are decodable with it but have fewer than
// n good shards (plan.BelowN). A foreign shard counts nothing.
func (pl *rangePlanner) held(self planCell, groups []*planGroup) {
	p := pl.cfg.Params
	for _, g := range groups {
		if self.state == cellGood && g.ref.SameStripe(&self.h) && p.Decodable(len(g.members)+1) && len(g.members)+1 < p.N {
			pl.plan.BelowN++
		}
	}
}

// fix is the Fix of off from its one decodable group g: the members'
// headers by position, and the members as sources, data shards first,
// then parity, each in position order. replace: this node holds a corrupt
// shard there.
func (pl *rangePlanner) fix(off uint64, row []planCell, g *planGroup, replace bool) Fix {
	p := pl.cfg.Params
	fix := Fix{Offset: off, Group: g.ref, Headers: make([]*stripe.ShardHeader, p.N), Replace: replace}
	for _, i := range g.members {
		h := row[i].h
		fix.Headers[i] = &h
	}
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
	return fix
}

// missing is the verdict on an offset where this node holds no good shard
// and no single stripe is decodable from the peers (decodable: how many
// are; maxSeen: the largest group; bad: peers with a bad entry; unknown:
// peers that might hold a shard here unseen). It counts the offset
// unsettled when no stripe is decodable but one could become so once the
// unheard peers answer, and ambiguous with two decodable stripes. An
// ambiguous offset, or one where a committed stripe may have had a shard
// (not void: maxSeen+unknown+1 >= W), is unresolved while some peer is
// unheard (it may still show it); once every peer answered (young ones
// included: they only ever regain shards of stripes decodable already)
// that is final, and below Birth it is a hole.
func (pl *rangePlanner) missing(off uint64, decodable, maxSeen, bad, unknown int) {
	p := pl.cfg.Params
	if decodable == 0 && maxSeen+pl.unheard+bad >= p.K {
		pl.unsettled++ // decodable once the unheard peers answer, maybe
	}
	if decodable > 1 {
		pl.plan.Ambiguous++
	} else if maxSeen+unknown+1 < p.W {
		return // void: no stripe can have been committed here
	}
	switch {
	case pl.unheard > 0:
		pl.plan.Unresolved = append(pl.plan.Unresolved, off)
	case off < pl.cfg.Birth:
		pl.plan.Holes = append(pl.plan.Holes, off)
	}
}

// nextOccupied is where a probing walk goes on after a Complete range
// ending at to: the first occupied offset any heard peer reported at or
// after to (PeerScan.After), math.MaxUint64 when none did; never below to.
func nextOccupied(pos int, peers []PeerScan, to uint64) uint64 {
	next := uint64(math.MaxUint64)
	for _, ps := range peers {
		if ps.Node != pos && ps.Heard && ps.After != 0 {
			next = min(next, ps.After)
		}
	}
	return max(next, to)
}
