package sim

import (
	"time"

	"github.com/raidq/raidq/stripe/quorum"
)

// alter is a `topic alter` of the accept window during the run
// (Config.Alter, docs/design.md#changing-a-topics-timing): the record
// changes at one moment with a plan (quorum.PlanAcceptLead) and a read
// delay covering both windows; every node learns it after a delay of its
// own, some after the switch (quorum.AcceptView's late path), and every
// reader takes the read delay up at a time of its own. When the window
// falls, the read delay follows in a second change once the first is in
// force, as `topic alter --wait` does.
type alter struct {
	plan      quorum.AcceptPlan
	readDelay time.Duration // the record's D after the (last) change
}

// scheduleAlter plans the change within the writes.
func (s *sim) scheduleAlter() {
	if !s.cfg.Alter {
		return
	}
	writes := int64(s.cfg.Stripes) * int64(s.cfg.StripeEvery)
	at := s.now + writeStart + s.rnd.Int64N(max(writes/3, 1)) // nodes learn it while producers still write
	factor := []float64{0.25, 0.5, 2, 4}[s.rnd.IntN(4)]
	if s.cfg.AlterFactor > 0 {
		factor = s.cfg.AlterFactor
	}
	// The lead covers a range, the future bound and the learning delay, as
	// quorum.AlterLead does, so most nodes learn the plan in time.
	lead := int64(1500*time.Millisecond) + s.rnd.Int64N(int64(500*time.Millisecond))
	s.at(at, func() { s.alterNow(factor, lead) })
}

// alterNow writes the change and lets nodes and readers learn it.
func (s *sim) alterNow(factor float64, lead int64) {
	prev := int64(s.params.AcceptWindow)
	next := max(int64(float64(prev)*factor), int64(5*time.Millisecond))
	plan := quorum.PlanAcceptLead(prev, next, s.now, lead)
	d := max(s.params.ReadDelay, time.Duration(max(prev, next)))
	s.alter = &alter{plan: plan, readDelay: d}
	s.params.ReadDelay = d // repair and the progress checks follow the record
	s.log.add("ALTER accept window %v -> %v from %s, read delay %v", time.Duration(prev), time.Duration(next), s.log.off(plan.From), d)
	for _, n := range s.nodes {
		delay := s.rnd.Int64N(lead / 5)
		if s.rnd.IntN(5) == 0 {
			delay = lead - int64(time.Second) + s.rnd.Int64N(int64(time.Second)) // cut off from metadata until near the switch
		}
		n.after(s.now+delay, func() { n.learnAlter() })
	}
	s.readersLearn(d)
	if next < prev {
		settle := int64(plan.From) + prev + int64(s.params.MaxSkew) + 1
		s.at(max(settle, s.now+1), func() {
			s.alter.readDelay = time.Duration(next)
			s.params.ReadDelay = time.Duration(next)
			s.log.add("ALTER read delay -> %v (the lower window is in force)", time.Duration(next))
			s.readersLearn(time.Duration(next))
		})
	}
}

// readersLearn has every reader take read delay d up after a delay of
// its own.
func (s *sim) readersLearn(d time.Duration) {
	max := s.alter.plan.Max()
	for _, r := range s.readers {
		r := r
		s.at(s.now+s.rnd.Int64N(int64(time.Second)), func() { r.r.SetTiming(int64(d), max) })
	}
}

// learnAlter is the node seeing the new record: its view starts now, at
// its clock, as actors/node makes it when an owner first loads under the
// plan. (A crash before this point loses nothing: a restarted node reads
// the current record, restartAlter.)
func (n *node) learnAlter() {
	n.view = quorum.NewAcceptView(n.s.alter.plan, n.clock(), int64(n.s.params.FutureBound))
	n.learned = true
	n.s.log.add("n%d learns the accept plan (late: %v)", n.id, n.view.Late())
	if n.s.cfg.inject.alterInPlace {
		n.reloadOwners()
	}
}

// restartAlter: a node restarting after the change reads the record at
// start, with a view from its restart clock.
func (n *node) restartAlter() {
	if n.s.alter != nil {
		n.view, n.learned = quorum.NewAcceptView(n.s.alter.plan, n.clock(), int64(n.s.params.FutureBound)), true
	}
}

// acceptFor is the accept window of a new owner of the range at lo.
func (n *node) acceptFor(lo uint64) int64 {
	switch {
	case !n.learned:
		return n.s.alterPrev()
	case n.s.cfg.inject.alterInPlace:
		return n.s.alter.plan.Next
	}
	return n.view.For(lo)
}

// alterPrev is the accept window before the change (the config's).
func (s *sim) alterPrev() int64 {
	if s.alter != nil {
		return s.alter.plan.Prev
	}
	return int64(s.params.AcceptWindow)
}

// reloadOwners (the alterInPlace bug) rebuilds every owner in memory under
// the new window everywhere, as a node would that reloads idle owners with
// the record's A and no plan: its write-once memory stays, its window for
// ranges it already closed rises.
func (n *node) reloadOwners() {
	for lo, o := range n.owners {
		slots := n.durableSlots(lo)
		for off, si := range n.mem {
			if off >= lo && off < lo+uint64(time.Second) {
				slots[off] = si
			}
		}
		fresh := n.newOwner(lo, o.Seal(), slots)
		fresh.RaiseFloor(n.floor.Used())
		n.owners[lo] = fresh
	}
}
