package core

// Birth of a new incarnation (docs/design.md#slot-store).
//
// A node whose store is new (first start, or a wiped data directory) must
// answer "unknown", never "empty", for every offset its old incarnation
// may have held. Its birth bounds that: below it, scans answer "unknown"
// until repair has filled the range, and Topic.BirthFor treats a birth at
// or before a topic's creation as "this node saw the whole topic". Taken
// from the node's own clock, a clock that is behind makes the birth too
// early: the node answers "empty" for the offsets its old incarnation held
// after it, and for the whole topic if the birth falls before its
// creation. So the birth comes from cluster time.

// BirthInput is what a node knows of cluster time when its store has just
// begun a new incarnation.
type BirthInput struct {
	Own uint64 // the node's clock (unix ns)
	// Clocks are other readings of cluster time: the clocks the node's
	// peers answered with, and the heartbeat times of the member records
	// (the node's own, left by its old incarnation, included).
	Clocks []uint64
	// Created are the creation times of the topics that exist. None: a
	// brand-new cluster, where no incarnation can have held anything.
	Created []uint64
	// Margin is added to the latest reading (BirthMargin): what an old
	// incarnation could have accepted beyond the clocks seen.
	Margin uint64
}

// Birth returns the new incarnation's birth. On a brand-new cluster (no
// topic) it is the node's own clock: every topic is created after it and
// BirthFor rightly gives 0 (the node sees all of it). Otherwise it is the
// latest of the node's clock, every other clock reading and every topic's
// creation, plus the margin: so it is after every offset the old
// incarnation held however far behind the node's clock is, and after every
// existing topic's creation, so BirthFor never turns it into 0 for a topic
// the node did not see whole.
func (in BirthInput) Birth() uint64 {
	if len(in.Created) == 0 {
		return in.Own
	}
	b := in.Own
	for _, c := range in.Clocks {
		b = max(b, c)
	}
	for _, c := range in.Created {
		b = max(b, c)
	}
	return b + in.Margin
}

// BirthMargin is the margin for a topic with future bound F and clock
// skew bound S: a node accepts offsets up to its clock + F, and its clock
// was up to S ahead of true time while the clock read now may be S behind
// it. The margin of several topics is the largest.
func BirthMargin(future, skew int64) uint64 {
	return uint64(max(future, 0) + 2*max(skew, 0))
}
