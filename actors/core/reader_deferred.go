package core

import (
	"sort"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/invariants"
	"github.com/raidq/raidq/stripe/quorum"
)

// Deferred in-doubt offsets.
//
// A row whose stripe might be committed but cannot be decoded from the
// nodes heard (quorum.InDoubt) holds the reader back for InDoubtWait and
// the look-ahead. After that the reader moves on, as docs/design.md#read-path says, but
// it does not forget the row: the row is deferred. The reader keeps
// re-asking its unheard nodes, backing off from DeferredRescan to
// MaxDeferredRescan, and settles it when the answers allow: decodable
// (delivered late, Delivery.Late), void (every unheard node answered and
// the group cannot have reached W), or its stripe delivered at another
// offset (a retry copy or a repair re-append). Until then LowWater stays
// at the row, so a consumer group never commits past it: a member that
// takes the partition over re-reads from there. At most MaxDeferred rows
// (and MaxDeferredBytes of shards) are kept; with that many the reader
// waits at the next in-doubt row instead of passing it. So no acked stripe is ever silently skipped
// (finding 1: a stripe on exactly W=k nodes, one of them unreachable).

// deferredSet is the reader's deferred rows, by offset.
type deferredSet struct {
	bytes int // sum of rowBytes of the rows
	rows  map[uint64]*row
	order []uint64               // sorted offsets
	ids   map[stripe.ID][]uint64 // open stripe id -> deferred offsets
}

func newDeferredSet() deferredSet {
	return deferredSet{rows: make(map[uint64]*row), ids: make(map[stripe.ID][]uint64)}
}

func (d *deferredSet) len() int { return len(d.order) }

// each calls fn for every deferred row in [from, to), in offset order.
func (d *deferredSet) each(from, to uint64, fn func(*row)) {
	i := sort.Search(len(d.order), func(i int) bool { return d.order[i] >= from })
	for ; i < len(d.order) && d.order[i] < to; i++ {
		fn(d.rows[d.order[i]])
	}
}

// rowBytes bounds the shard bytes a row may come to hold: all n shards
// of its largest.
func rowBytes(rw *row) int {
	big := 0
	for _, s := range rw.shards {
		if s != nil {
			big = max(big, len(s.Data))
		}
	}
	return big * len(rw.shards)
}

func (d *deferredSet) full(maxRows, maxBytes int) bool {
	return len(d.order) >= maxRows || (maxBytes > 0 && d.bytes >= maxBytes)
}

func (d *deferredSet) add(rw *row, open []stripe.ID) {
	rw.bytes = rowBytes(rw)
	d.bytes += rw.bytes
	d.rows[rw.offset] = rw
	i := sort.Search(len(d.order), func(i int) bool { return d.order[i] >= rw.offset })
	d.order = append(d.order, 0)
	copy(d.order[i+1:], d.order[i:])
	d.order[i] = rw.offset
	for _, id := range open {
		d.ids[id] = append(d.ids[id], rw.offset)
	}
}

func (d *deferredSet) remove(rw *row) {
	d.bytes -= rw.bytes
	delete(d.rows, rw.offset)
	i := sort.Search(len(d.order), func(i int) bool { return d.order[i] >= rw.offset })
	if i < len(d.order) && d.order[i] == rw.offset {
		d.order = append(d.order[:i], d.order[i+1:]...)
	}
	for _, s := range rw.shards {
		if s == nil {
			continue
		}
		offs := d.ids[s.ID]
		for j, o := range offs {
			if o == rw.offset {
				offs = append(offs[:j], offs[j+1:]...)
				break
			}
		}
		if len(offs) == 0 {
			delete(d.ids, s.ID)
		} else {
			d.ids[s.ID] = offs
		}
	}
}

// deferRow moves rw, whose groups doubt are in doubt, into the deferred
// set and reports each of them (the nodes' repair re-appends a committed
// one; the report is advisory, the deferred row is what the reader keeps).
func (r *Reader) deferRow(now int64, rw *row, doubt []stripe.ID, out *Output) {
	rw.done = make(map[stripe.ID]bool)
	for _, g := range rw.groups() {
		rw.done[g.ref.ID] = true
	}
	for _, id := range doubt {
		delete(rw.done, id)
		seen := 0
		for _, g := range rw.groups() {
			if g.ref.ID == id {
				seen = g.seen
			}
		}
		out.InDoubt = append(out.InDoubt, InDoubtReport{Offset: rw.offset, Stripe: id, Seen: seen, Unheard: rw.unheard()})
	}
	rw.askEvery = max(r.cfg.DeferredRescan, 1)
	rw.nextAsk = now + rw.askEvery
	r.deferred.add(rw, doubt)
}

// rescanDeferred re-asks the unheard nodes (and those holding a corrupt
// slot, row.askable) of the deferred rows due at now: one scan over the
// rows of one owner range, from the first due row.
func (r *Reader) rescanDeferred(now int64) (Scan, bool) {
	d := &r.deferred
	for i, off := range d.order {
		if now < d.rows[off].nextAsk {
			continue
		}
		to := min(RangeStart(off)+RangeNanos, r.frontier)
		unheard := make([]bool, r.cfg.Params.N)
		for _, o := range d.order[i:] {
			rw := d.rows[o]
			if o >= to {
				break
			}
			if now < rw.nextAsk {
				continue
			}
			rw.nextAsk = now + rw.askEvery
			rw.askEvery = min(2*rw.askEvery, max(r.cfg.MaxDeferredRescan, rw.askEvery))
			for _, n := range rw.askable() { // corrupt slots too: repair may rewrite them
				unheard[n] = true
			}
		}
		var nodes []int
		for n, u := range unheard {
			if u {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) == 0 || to <= off {
			continue // nobody to ask: no group here can still be in doubt
		}
		return Scan{From: off, To: to, Nodes: nodes, Rescan: true}, true
	}
	return Scan{}, false
}

// settleDeferred settles the deferred rows a rescan of [sc.From, sc.To)
// touched.
func (r *Reader) settleDeferred(sc Scan, out *Output) {
	var settled []*row
	r.deferred.each(sc.From, sc.To, func(rw *row) {
		if r.settleRow(rw, out) {
			settled = append(settled, rw)
		}
	})
	for _, rw := range settled {
		r.deferred.remove(rw)
		out.Resolved = append(out.Resolved, rw.offset)
	}
}

// settleRow judges a deferred row's open groups; true when none is left
// in doubt. A group whose stripe was delivered at another offset is done.
func (r *Reader) settleRow(rw *row, out *Output) bool {
	p := r.cfg.Params
	unheard := rw.unheardCount()
	open := false
	for _, g := range rw.groups() {
		id := g.ref.ID
		if rw.done[id] {
			continue
		}
		if off, ok := r.seen[id]; ok && off != rw.offset {
			rw.done[id] = true
			continue
		}
		switch p.Judge(g.seen, unheard) {
		case quorum.Deliver:
			rw.done[id] = true
			r.deliverLate(rw, g, out)
		case quorum.Void:
			rw.done[id] = true
			out.Voids++
		default:
			open = true
		}
	}
	return !open
}

// deliverLate decodes a deferred group and emits its records, at their
// own (lower) positions, marked Late.
func (r *Reader) deliverLate(rw *row, g *group, out *Output) {
	// Only a deferred row goes back: one the reader passed (deferRow).
	if invariants.Enabled && (r.deferred.rows[rw.offset] != rw || rw.offset >= r.pos.Offset) {
		invariants.Failf("reader: late delivery at offset %d (deferred=%v), position %s: only deferred rows behind the position are delivered late",
			rw.offset, r.deferred.rows[rw.offset] == rw, r.pos)
	}
	r.emit(rw, g, r.start, true, out)
}

// deliveredElsewhere settles the deferred groups of stripe id once the
// stripe was delivered at offset off (a retry copy or a re-append).
func (r *Reader) deliveredElsewhere(id stripe.ID, off uint64, out *Output) {
	offs := r.deferred.ids[id]
	if len(offs) == 0 {
		return
	}
	for _, o := range append([]uint64(nil), offs...) {
		rw := r.deferred.rows[o]
		if rw == nil || o == off {
			continue
		}
		rw.done[id] = true
		if r.settleRow(rw, out) {
			r.deferred.remove(rw)
			out.Resolved = append(out.Resolved, o)
		}
	}
}

// Deferred is the number of unresolved in-doubt offsets the reader keeps.
func (r *Reader) Deferred() int { return r.deferred.len() }

// LowWater is the lowest position a consumer may commit: the lowest
// unresolved in-doubt offset, or Pos when there is none. Committing past
// it could lose an acked stripe for good if the reader stopped.
func (r *Reader) LowWater() Position {
	if len(r.deferred.order) > 0 && r.deferred.order[0] < r.pos.Offset {
		return Position{Offset: r.deferred.order[0]}
	}
	return r.pos
}
