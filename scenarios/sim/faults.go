package sim

import "time"

// minUptime is how long a node stays up between two of its crashes, so
// that rescans reach it within the readers' in-doubt wait.
const minUptime = int64(time.Second)

// faultSpan is how long faults are scheduled for: the writes and the
// second and a half after them.
func (s *sim) faultSpan() int64 {
	return writeStart + int64(s.cfg.Stripes)*int64(s.cfg.StripeEvery) + 1500*int64(time.Millisecond)
}

// scheduleReaderRestarts plans Config.ReaderRestarts reader failovers.
func (s *sim) scheduleReaderRestarts() {
	for range s.cfg.ReaderRestarts {
		r := s.readers[s.rnd.IntN(len(s.readers))]
		s.at(s.now+s.rnd.Int64N(s.faultSpan()), r.restart)
	}
}

// outage is one planned crash of one node.
type outage struct {
	node       int
	start, end int64
}

// scheduleCrashes plans up to Config.Crashes crashes over the writes and
// the second and a half after them, within the fault model: each shorter
// than MaxCrash, at most n-W nodes down at once, and minUptime between
// two crashes of one node. Crashes that do not fit are dropped.
func (s *sim) scheduleCrashes() {
	span := s.faultSpan()
	var plan []outage
	for range s.cfg.Crashes {
		for try := 0; try < 10; try++ {
			o := outage{node: s.rnd.IntN(s.cfg.Nodes), start: s.now + s.rnd.Int64N(span)}
			o.end = o.start + int64(10*time.Millisecond) + s.rnd.Int64N(max(int64(s.cfg.MaxCrash-10*time.Millisecond), 1))
			if s.fits(plan, o) {
				plan = append(plan, o)
				n := s.nodes[o.node]
				s.at(o.start, n.crash)
				s.at(o.end, n.restart)
				break
			}
		}
	}
}

// fits reports whether o keeps the plan within the fault model. It counts
// every other outage overlapping o as down for all of o (conservative).
func (s *sim) fits(plan []outage, o outage) bool {
	down := 0
	for _, p := range plan {
		if p.node == o.node && p.start < o.end+minUptime && o.start < p.end+minUptime {
			return false
		}
		if p.start < o.end && o.start < p.end {
			down++
		}
	}
	return down+1 <= s.params.WriteTolerance()
}
