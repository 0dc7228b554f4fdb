package core

import "math"

// RepairWalk is the policy of one repair walk over a span (RepairSpans):
// which owner range to look at next, what a range's plan means for the
// partition's record of settled ranges, and when the walk's mark and holes
// must be made durable. The driver (actors/node/repair_pass.go) scans, plans
// with PlanRange, applies the fixes and saves the marks; the walk does no
// I/O.
//
// A range is done for good when nothing is left to rebuild there
// (RangePlan.Settled) and, in the gap of a young incarnation, every offset
// is known (Resolved); done ranges go into the settled set so later passes
// skip them, and a range whose peers hold nothing up to RangePlan.Next
// settles everything up to there at once. The mark the driver saves is
// the end of the settled prefix from the span's start.
type RepairWalk struct {
	span   Span
	done   *Intervals
	cur    uint64
	holes  []uint64
	ranges int
	undone int
}

// RepairMarksEvery: the walk asks for its mark and holes to be saved
// after this many ranges, or this many holes, so a long walk cut short
// (a restart) keeps most of its progress.
const RepairMarksEvery = 256

// NewRepairWalk starts a walk of sp over the settled set done (the
// partition's gap or window set, kept across passes; the walk adds to it).
func NewRepairWalk(sp Span, done *Intervals) *RepairWalk {
	done.PruneBelow(sp.From)
	return &RepairWalk{span: sp, done: done, cur: sp.From}
}

// Next is the next range to walk, [from, to) within one owner range,
// skipping settled ones; false once the span is walked.
func (w *RepairWalk) Next() (from, to uint64, ok bool) {
	for w.cur < w.span.To {
		if end := w.done.End(w.cur); end > w.cur {
			w.cur = end
			continue
		}
		return w.cur, min(RangeStart(w.cur)+RangeNanos, w.span.To), true
	}
	return 0, 0, false
}

// Settle records the range Next returned: its plan, and whether every fix
// of it succeeded (false also when the walk was cancelled). It reports
// whether the marks are due to be saved now.
func (w *RepairWalk) Settle(plan RangePlan, fixed bool) (save bool) {
	from := w.cur
	to := min(RangeStart(from)+RangeNanos, w.span.To)
	if w.span.Gap {
		w.holes = append(w.holes, plan.Holes...)
	}
	good := fixed && plan.Settled && (!w.span.Gap || plan.Resolved)
	next := to
	if good {
		end := to
		if plan.Complete && plan.Next > to { // nothing on any peer up to Next
			if plan.Next == math.MaxUint64 {
				end = w.span.To
			} else {
				end = max(to, min(RangeStart(plan.Next), w.span.To))
			}
		}
		w.done.Add(from, end)
		next = end
	} else {
		w.undone++
	}
	w.cur = next
	w.ranges++
	return w.ranges%RepairMarksEvery == 0 || len(w.holes) >= RepairMarksEvery
}

// Mark is the end of the settled prefix from the span's start.
func (w *RepairWalk) Mark() uint64 { return w.done.End(w.span.From) }

// TakeHoles returns the holes found since the last call (gap walks only).
func (w *RepairWalk) TakeHoles() []uint64 {
	h := w.holes
	w.holes = nil
	return h
}

// Undone counts the ranges the walk could not settle.
func (w *RepairWalk) Undone() int { return w.undone }
