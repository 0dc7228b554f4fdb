package sim

import (
	"strings"
	"time"
)

// Clocks. Every actor sees true time plus its own offset:
//   - producers ± ProducerSkew (the writer learns the nodes' clocks from
//     their replies and corrects for them);
//   - nodes ± NodeSkew each, plus one common offset ± NodeOffset (an
//     ensemble synced to a wrong source: everyone else is off against it);
//   - readers ± ReaderSkew, and r0 FastReader more. A reader fast against
//     the nodes by more than D-A scans offsets that still take writes; the
//     nodes refuse to seal their future (CLOCK_AHEAD), and their seals
//     turn late writes away (SEALED), so the protocol survives it. Fast by
//     more than SkipBehind it does not (HardFastReader).

// readerStart is where readers begin: a second before the run, below
// every write even with the nodes' clocks behind, and ReaderBehind more.
func (s *sim) readerStart() uint64 {
	return uint64(epoch0 - int64(time.Second) - int64(s.cfg.NodeOffset) - int64(s.cfg.ReaderBehind))
}

// logClocks writes every actor's clock offset into the op log, so a
// failing seed shows who was off and by how much.
func (s *sim) logClocks(common int64) {
	var b strings.Builder
	b.WriteString("clocks: nodes common " + s.log.skew(common))
	for _, n := range s.nodes {
		b.WriteString(sprintf(" n%d=%s", n.id, s.log.skew(n.skew)))
	}
	b.WriteString("; producers")
	for _, p := range s.prods {
		b.WriteString(sprintf(" p%d=%s", p.id, s.log.skew(p.skew)))
	}
	b.WriteString("; readers")
	for _, r := range s.readers {
		b.WriteString(sprintf(" r%d=%s", r.id, s.log.skew(r.skew)))
	}
	s.log.add("%s", b.String())
	if s.cfg.FastReader > 0 {
		s.log.add("r0 clock is %v fast on purpose (FastReader): it leads the nodes by about %s",
			s.cfg.FastReader, s.log.skew(s.readers[0].skew-common))
	}
	if s.cfg.ReaderBehind > 0 || s.cfg.ReaderLate > 0 {
		s.log.add("readers start at %s, %v late", s.log.off(s.readerStart()), s.cfg.ReaderLate)
	}
}

// durationNs prints a span of offsets or nanoseconds as a duration.
func durationNs(d uint64) time.Duration { return time.Duration(d).Round(time.Microsecond) }

// actorClock is a group member's or lease holder's clock: off by skew
// and running at a rate off by ppm parts per million (drift), so that
// spans measured on it differ from true ones.
type actorClock struct {
	skew int64
	ppm  int64
}

// at is the clock's reading at true time t.
func (c actorClock) at(t int64) int64 { return t + c.skew + (t-epoch0)*c.ppm/1_000_000 }

// when is the true time at which the clock reads w.
func (c actorClock) when(w int64) int64 {
	return epoch0 + (w-c.skew-epoch0)*1_000_000/(1_000_000+c.ppm)
}

// span is the true time a span d of this clock takes.
func (c actorClock) span(d int64) int64 { return d * 1_000_000 / (1_000_000 + c.ppm) }

func (c actorClock) String() string {
	return sprintf("%+.3fms%+dppm", float64(c.skew)/1e6, c.ppm)
}
