package sim

import "github.com/raidq/raidq/actors/core"

// Deferred in-doubt offsets (core reader_deferred.go). A reader that has
// waited InDoubtWait and the look-ahead at an offset whose stripe might be
// committed but cannot be decoded reports it in doubt and moves on, but
// keeps the row: it re-asks the unheard nodes and, once they answer,
// delivers the stripe late (Delivery.Late, below records already
// delivered), settles it void, or drops it when the stripe turns up at
// another offset. Its LowWater stays at the row meanwhile, so a consumer
// never commits past it. The simulation follows that contract: a restart
// resumes at the low water, a reader is not done while it still defers an
// offset, and an in-doubt report is a violation only if the reader never
// delivers the acked stripe after all.

// resumeFrom is where a restarted reader resumes: right after the last
// record it delivered in order, or at its low water if an in-doubt offset
// below that is still deferred, so the new incarnation reads it again.
func (r *reader) resumeFrom() core.Position {
	from := r.start
	for i := len(r.got) - 1; i >= 0; i-- {
		if !r.got[i].late {
			last := r.got[i].pos
			from = core.Position{Offset: last.Offset, Index: last.Index + 1}
			break
		}
	}
	if low := r.r.LowWater(); low.Less(from) {
		from = low
	}
	if from.Less(r.start) {
		from = r.start
	}
	return from
}

// checkInDoubt: a reader that reported an acked stripe in doubt still
// delivered it (late, or at another copy). The report itself is allowed:
// with the stripe on exactly W=k nodes and one of them away for longer
// than InDoubtWait, the reader cannot tell it from a stripe that never
// committed until the node answers.
func (s *sim) checkInDoubt() {
	for _, r := range s.readers {
		got := map[string]bool{}
		for _, d := range r.view {
			got[d.value] = true
		}
		for _, d := range r.inDoubt {
			off, acked := s.truth.acked[d.Stripe]
			if !acked {
				continue
			}
			s.res.AckedInDoubt++
			if s.wipeLost(d.Stripe) && s.keptInDoubt(r, d.Stripe) {
				continue // unreadable for good, and still kept (checkAckedDelivered)
			}
			if vs := s.truth.values[d.Stripe]; len(vs) > 0 && !got[vs[0]] {
				s.violate("r%d reported %s in doubt at %s (seen %d, unheard n%s) and never delivered it, but it was acked at %s (durable on n%s)",
					r.id, sid(d.Stripe), s.log.off(d.Offset), d.Seen, nodeList(d.Unheard), s.log.off(off),
					nodeList(s.holders(d.Stripe, off)))
			}
		}
	}
}
