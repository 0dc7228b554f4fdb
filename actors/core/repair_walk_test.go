package core

import (
	"math"
	"testing"
)

// TestRepairWalk: settled ranges are skipped by later walks, an unsettled
// one stays to be walked again and holds the mark back, and a range whose
// peers hold nothing further settles the rest of the span at once.
func TestRepairWalk(t *testing.T) {
	from := uint64(100) * RangeNanos
	sp := Span{From: from, To: from + 10*RangeNanos}
	var done Intervals
	w := NewRepairWalk(sp, &done)
	var walked []uint64
	plans := []RangePlan{{Settled: true}, {Settled: false}, {Settled: true, Complete: true, Next: math.MaxUint64}}
	for i := 0; ; i++ {
		cur, to, ok := w.Next()
		if !ok {
			break
		}
		if to != cur+RangeNanos {
			t.Fatalf("range [%d,%d) is not one owner range", cur, to)
		}
		walked = append(walked, cur)
		w.Settle(plans[i], true)
	}
	if len(walked) != 3 || w.Undone() != 1 {
		t.Fatalf("walked %v, undone %d: want three ranges, one undone", walked, w.Undone())
	}
	if w.Mark() != from+RangeNanos {
		t.Fatalf("mark %d, want the end of the first range %d (the second is not settled)", w.Mark(), from+RangeNanos)
	}
	again := NewRepairWalk(sp, &done)
	cur, _, ok := again.Next()
	if !ok || cur != from+RangeNanos {
		t.Fatalf("second walk starts at %d, want the unsettled range %d", cur, from+RangeNanos)
	}
	again.Settle(RangePlan{Settled: true}, true)
	if _, _, ok := again.Next(); ok || again.Mark() != sp.To {
		t.Fatalf("after settling it: mark %d, want the span's end %d", again.Mark(), sp.To)
	}
	// A gap walk keeps the holes of its ranges for the driver to save,
	// and needs Resolved as well.
	gap := NewRepairWalk(Span{From: from, To: from + RangeNanos, Gap: true}, &Intervals{})
	gap.Next()
	gap.Settle(RangePlan{Settled: true, Holes: []uint64{from + 5}}, true)
	if h := gap.TakeHoles(); len(h) != 1 || gap.Undone() != 1 {
		t.Fatalf("gap walk: holes %v, undone %d: want the hole and the range undone (not resolved)", h, gap.Undone())
	}
}
