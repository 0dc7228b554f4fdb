package core

import (
	"testing"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/invariants/invariantstest"
)

// The reader's assertions (reader.go, reader_deferred.go): positions
// only move forward, but for late deliveries of deferred rows, and every
// scan stays inside one owner range.

// TestReaderInvariantScanInRange: a rescan of a row the frontier has not
// reached (a row no main scan made) would be empty.
func TestReaderInvariantScanInRange(t *testing.T) {
	r := newTestReader()
	n := params().N
	off := r.Frontier() + 10
	r.rows[off] = &row{offset: off, state: make([]uint8, n), shards: make([]*stripe.Shard, n)}
	r.order = append(r.order, off)
	invariantstest.Fires(t, "is empty or crosses the owner range boundary", func() {
		r.Next(startNow())
	})
}

// TestReaderInvariantLateOnlyBehind: only a deferred row the reader has
// passed is delivered late (TestReaderDeferredDeliversLate without the
// assertion's breach delivers x late).
func TestReaderInvariantLateOnlyBehind(t *testing.T) {
	w := newWorld(6)
	x, tail := sid(0, 1), sid(1, 1)
	w.put(encode(t, x, o1, 2), 0, 1, 2, 3)
	w.put(encode(t, tail, o2, 1), 0, 1, 2, 3, 4, 5)
	back := until() + 2000*ms
	deaf := func(_ Scan, now int64, _ *Reader) []int {
		if now < back {
			return []int{3}
		}
		return nil
	}
	r := newTestReader()
	drive(r, w, startNow(), until()+100*ms, 10*ms, deaf)
	if r.Deferred() != 1 {
		t.Fatalf("deferred %d, want x", r.Deferred())
	}
	now := back + 10_000*ms
	sc, ok := r.rescanDeferred(now)
	if !ok || sc.From != o1 {
		t.Fatalf("rescan %+v (%v), want one of x's offset", sc, ok)
	}
	r.pos = Position{Offset: o1} // as if the reader had not passed x
	invariantstest.Fires(t, "only deferred rows behind the position are delivered late", func() {
		r.Apply(now, sc, w.answer(sc))
	})
}

// TestReaderInvariantForward: Apply's check that the position and the
// frontier never go back, and that deliveries go back only when late.
// No input makes Apply break it today (advance, the frontier's updates
// and emit's filter hold it), so the check is called as Apply calls it.
func TestReaderInvariantForward(t *testing.T) {
	r := newTestReader()
	r.pos, r.frontier = Position{Offset: base + 100}, base+100
	invariantstest.Fires(t, "moved back", func() {
		r.checkApply(Position{Offset: base + 200}, r.frontier, &Output{})
	})
	invariantstest.Fires(t, "moved back", func() {
		r.checkApply(r.pos, r.frontier+1, &Output{})
	})
	back := &Output{Deliveries: []Delivery{{Pos: Position{Offset: base + 150}}, {Pos: Position{Offset: base + 120}}}}
	invariantstest.Fires(t, "goes back", func() { r.checkApply(r.pos, r.frontier, back) })
	behind := &Output{Deliveries: []Delivery{{Pos: Position{Offset: base + 50}}}}
	invariantstest.Fires(t, "goes back", func() { r.checkApply(r.pos, r.frontier, behind) })
	ahead := &Output{Deliveries: []Delivery{{Pos: Position{Offset: base + 150}, Late: true}}}
	invariantstest.Fires(t, "late delivery at", func() { r.checkApply(r.pos, r.frontier, ahead) })
	// Late deliveries behind the position, among forward ones, are fine.
	ok := &Output{Deliveries: []Delivery{{Pos: Position{Offset: base + 100}}, {Pos: Position{Offset: base + 50}, Late: true},
		{Pos: Position{Offset: base + 100, Index: 1}}, {Pos: Position{Offset: base + 130}}}}
	r.checkApply(r.pos, r.frontier, ok)
}
