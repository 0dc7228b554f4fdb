package sim

import "time"

// faultSpan is how long faults are scheduled for: the writes and the
// second and a half after them.
func (s *sim) faultSpan() int64 {
	return writeStart + int64(s.cfg.Stripes)*int64(s.cfg.StripeEvery) + 1500*int64(time.Millisecond)
}

// scheduleReaderRestarts plans Config.ReaderRestarts reader failovers,
// after the readers start (Config.ReaderLate). With long outages they may
// also come seconds after the writes, while readers still defer in-doubt
// offsets (a restart then resumes at the low water).
func (s *sim) scheduleReaderRestarts() {
	span := s.faultSpan()
	if s.cfg.LongCrashes > 0 || s.cfg.QuorumLoss > 0 {
		span += int64(s.cfg.MaxLongCrash) + int64(s.cfg.QuorumLoss) + int64(3*time.Second)
	}
	for range s.cfg.ReaderRestarts {
		r := s.readers[s.rnd.IntN(len(s.readers))]
		s.at(s.now+int64(s.cfg.ReaderLate)+s.rnd.Int64N(span), r.restart)
	}
}
