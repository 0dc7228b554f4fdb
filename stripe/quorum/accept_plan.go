package quorum

// AcceptPlan is a topic's accept window over offsets, the node half of an
// ordered `topic alter` (docs/design.md#changing-a-topics-timing). The
// read frontier needs each node, per owner range, never to take a write
// below an offset it closed for a reader; a node closes by clock - A and
// refuses below clock - A with the same A, so the rule holds while a
// range's A is fixed. Changing A in place would break it when A rises: a
// node that closed up to clock - A1 would then take writes down to clock -
// A2 < clock - A1. So a change applies by offset, not by time: ranges
// starting before From keep Prev, ranges from From on use Next. From lies
// AlterLead ahead of the change, on a range boundary, so every node learns
// the change before its clock reaches From and no owner of a range at or
// past From exists yet with the old window.
//
// AcceptPlan is a value; the zero From means no change pending (Next
// everywhere).
type AcceptPlan struct {
	Prev, Next int64  // accept windows in ns
	From       uint64 // first range start using Next (a multiple of RangeAlign); 0: none
}

// RangeAlign is the width of a node's owner range (actors/core.RangeNanos,
// which asserts they agree): a plan switches windows on a range boundary,
// so every owner range has one window.
const RangeAlign uint64 = 1_000_000_000

func rangeStart(off uint64) uint64 { return off - off%RangeAlign }

// AlterLead is how far ahead of its writing a change of the accept window
// starts (AcceptPlan.From): more than metadata takes to reach every node
// (a watch delivers in milliseconds; a JetStream leader move stalls it for
// seconds) plus the future bound and clock skew, within which a node may
// already hold an owner for a range ahead of its clock.
const AlterLead int64 = 15_000_000_000

// PlanAccept returns the plan that changes the window from prev to next,
// written at time now (ns): From is the first range boundary at least
// AlterLead after now.
func PlanAccept(prev, next, now int64) AcceptPlan { return PlanAcceptLead(prev, next, now, AlterLead) }

// PlanAcceptLead is PlanAccept with another lead (the simulation's runs
// last seconds).
func PlanAcceptLead(prev, next, now, lead int64) AcceptPlan {
	if prev == next {
		return AcceptPlan{Prev: next, Next: next}
	}
	from := rangeStart(uint64(max(now+lead, 0))) + RangeAlign
	return AcceptPlan{Prev: prev, Next: next, From: from}
}

// For is the accept window of the owner range starting at lo.
func (p AcceptPlan) For(lo uint64) int64 {
	if p.From != 0 && lo < p.From {
		return p.Prev
	}
	return p.Next
}

// Max is the largest window in force anywhere under the plan: readers
// bound their far-behind skip by it, and D must cover it.
func (p AcceptPlan) Max() int64 {
	if p.From == 0 {
		return p.Next
	}
	return max(p.Prev, p.Next)
}

// Settled reports whether, at time now (ns), the plan's change is in force
// on every node clock within skew of now: every range before From has
// passed clock - Prev, so no node still takes a write there and a further
// change (or a read delay below Prev) may follow.
func (p AcceptPlan) Settled(now, skew int64) bool {
	return p.From == 0 || now > int64(p.From)+max(p.Prev, p.Next)+skew
}

// AcceptView is one node's use of a plan. A node that learns the plan
// late, with its clock already near From, may hold owners for ranges at
// or past From that use the old window; they keep it, and any owner it
// loads later for a range below the late boundary uses the smaller of the
// two windows, which refuses at least what either one closed. A restart
// starts a new view, so such ranges stay on the smaller window after it too.
type AcceptView struct {
	plan   AcceptPlan
	lateTo uint64 // ranges in [plan.From, lateTo) use min(Prev, Next)
}

// NewAcceptView is a node's view of plan, first seen at node clock seen
// with the topic's future bound: owners may exist up to seen + future.
func NewAcceptView(plan AcceptPlan, seen, future int64) AcceptView {
	v := AcceptView{plan: plan}
	if horizon := uint64(max(seen+future, 0)); plan.From != 0 && horizon+RangeAlign > plan.From {
		v.lateTo = rangeStart(horizon) + 2*RangeAlign
	}
	return v
}

// Late reports whether the node learned the plan too late for From.
func (v AcceptView) Late() bool { return v.lateTo != 0 }

// Plan is the plan the view was made from.
func (v AcceptView) Plan() AcceptPlan { return v.plan }

// For is the accept window this node uses for the owner range at lo.
func (v AcceptView) For(lo uint64) int64 {
	if v.plan.From != 0 && lo >= v.plan.From && lo < v.lateTo {
		return min(v.plan.Prev, v.plan.Next)
	}
	return v.plan.For(lo)
}
