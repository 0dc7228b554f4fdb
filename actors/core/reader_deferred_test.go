package core

import "testing"

// TestReaderDeferredDeliversLate: a stripe committed on exactly W = k = 4
// nodes, one of which is unreachable for 3 s at read time, is in doubt.
// The reader moves past it after its waits (later records are delivered)
// but keeps it deferred: LowWater stays at its offset, and once the node
// answers again the stripe is delivered late. Before deferral existed the
// reader recorded it in doubt and never delivered it (finding 1).
func TestReaderDeferredDeliversLate(t *testing.T) {
	w := newWorld(6)
	x, tail := sid(0, 1), sid(1, 1)
	w.put(encode(t, x, o1, 2), 0, 1, 2, 3)
	w.put(encode(t, tail, o2, 1), 0, 1, 2, 3, 4, 5)
	start := startNow()
	back := until() + 2000*ms
	deaf := func(_ Scan, now int64, _ *Reader) []int {
		if now < back {
			return []int{3}
		}
		return nil
	}
	r := newTestReader()
	l := drive(r, w, start, until()+100*ms, 10*ms, deaf)
	if len(l.inDoubt) != 1 || l.inDoubt[0].Stripe != x {
		t.Fatalf("in doubt %+v, want x once", l.inDoubt)
	}
	wantValues(t, l.values, values(tail, 1))
	if r.Deferred() != 1 || r.LowWater() != (Position{Offset: o1}) {
		t.Fatalf("deferred %d, low water %v: want x's offset %d kept", r.Deferred(), r.LowWater(), o1)
	}
	l2 := drive(r, w, until()+100*ms, back+10_000*ms, 10*ms, deaf)
	wantValues(t, l2.values, values(x, 2))
	if r.Deferred() != 0 || r.LowWater() != r.Pos() {
		t.Fatalf("after the node answered: deferred %d, low water %v, pos %v", r.Deferred(), r.LowWater(), r.Pos())
	}
}

// TestReaderDeferredSettles: a deferred offset is settled as void once its
// unheard node answers empty, and as done when its stripe is delivered at
// another offset (a re-append), without delivering it twice.
func TestReaderDeferredSettles(t *testing.T) {
	w := newWorld(6)
	x, y := sid(0, 1), sid(1, 1)
	w.put(encode(t, x, o1, 2), 0, 1, 2) // never committed: void once node 3 answers
	w.put(encode(t, y, o1+ms2u(5), 2), 0, 1, 2)
	back := until() + 1000*ms
	deaf := func(sc Scan, now int64, _ *Reader) []int {
		if now < back {
			return []int{3}
		}
		return nil
	}
	r := newTestReader()
	drive(r, w, startNow(), until()+100*ms, 10*ms, deaf)
	if r.Deferred() != 2 {
		t.Fatalf("deferred %d, want x and y", r.Deferred())
	}
	// y is re-appended later, whole, where the frontier will reach it.
	reappend := uint64(until()) + ms2u(500) - uint64(params().ReadDelay)
	w.put(encode(t, y, reappend, 2), 0, 1, 2, 4, 5)
	l := drive(r, w, until()+100*ms, back+10_000*ms, 10*ms, deaf)
	wantValues(t, l.values, values(y, 2))
	if r.Deferred() != 0 {
		t.Fatalf("deferred %d after the node answered and y was re-appended", r.Deferred())
	}
	if l.voids != 1 {
		t.Fatalf("%d voids, want x settled void", l.voids)
	}
}

// TestReaderDeferredFullWaits: with MaxDeferred offsets (or
// MaxDeferredBytes of shards) unresolved the reader waits at the next
// in-doubt offset instead of passing it.
func TestReaderDeferredFullWaits(t *testing.T) {
	for _, bound := range []string{"rows", "bytes"} {
		cfg := DefaultReaderConfig(params())
		if bound == "rows" {
			cfg.MaxDeferred = 1
		} else {
			cfg.MaxDeferredBytes = 1
		}
		t.Run(bound, func(t *testing.T) { deferredFullWaits(t, cfg) })
	}
}

func deferredFullWaits(t *testing.T, cfg ReaderConfig) {
	w := newWorld(6)
	x, y, tail := sid(0, 1), sid(1, 1), sid(2, 1)
	w.put(encode(t, x, o1, 1), 0, 1, 2)
	w.put(encode(t, y, o1+ms2u(5), 1), 0, 1, 2)
	w.put(encode(t, tail, o2, 1), 0, 1, 2, 3, 4, 5)
	r := NewReader(cfg, Position{Offset: base})
	l := drive(r, w, startNow(), until()+5000*ms, 10*ms, deafTo(3))
	if len(l.values) != 0 || r.Deferred() != 1 || r.Pos().Offset != o1+ms2u(5) {
		t.Fatalf("delivered %v, deferred %d, pos %v: want a wait at y", l.values, r.Deferred(), r.Pos())
	}
	if l.stalls == 0 {
		t.Fatal("the wait must be reported (Output.Stalled)")
	}
}

// TestReaderRescansDoNotStarve: a node that never answers leaves a row in
// doubt. If every rescan of it takes the scan timeout (here 1 s of reader
// time per scan), rescans fall due again before the next Next; main scans
// must still run (finding 6: 3 main scans and 57 rescans in 60 s).
func TestReaderRescansDoNotStarve(t *testing.T) {
	w := newWorld(6)
	x := sid(0, 1)
	w.put(encode(t, x, o1, 1), 0, 1, 2)
	for i := range 50 {
		w.put(encode(t, sid(1, uint64(i+1)), o1+ms2u(int64(100*i+50)), 1), 0, 1, 2, 3, 4, 5)
	}
	r := newTestReader()
	now, mains, rescans := startNow(), 0, 0
	for range 60 {
		sc, ok := r.Next(now)
		if !ok {
			now += 10 * ms
			continue
		}
		if sc.Rescan {
			rescans++
		} else {
			mains++
		}
		r.Apply(now, sc, w.answer(sc, 5))
		now += 1000 * ms
	}
	if mains < 25 {
		t.Fatalf("%d main scans and %d rescans in 60 calls: rescans starve the reader", mains, rescans)
	}
}
