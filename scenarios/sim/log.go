package sim

import (
	"bytes"
	"fmt"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// logger is the op log: one compact line per event, prefixed by the true
// simulated time in ms since the start (ns precision). Offsets print the
// same way, so a line reads "when  who  what  where".
type logger struct {
	s   *sim
	buf []byte
}

// add appends one line.
func (l *logger) add(format string, args ...any) {
	l.buf = fmt.Appendf(l.buf, "%12.6f ", float64(l.s.now-epoch0)/1e6)
	l.buf = fmt.Appendf(l.buf, format, args...)
	l.buf = append(l.buf, '\n')
}

// lines returns the log, one string per line.
func (l *logger) lines() []string {
	var out []string
	for _, b := range bytes.Split(bytes.TrimSuffix(l.buf, []byte{'\n'}), []byte{'\n'}) {
		out = append(out, string(b))
	}
	return out
}

// off prints an offset like a log time: ms since the start, ns precision.
func (l *logger) off(o uint64) string { return fmt.Sprintf("@%.6f", float64(int64(o)-epoch0)/1e6) }

// offOrNone prints an offset, or "none" for 0.
func (l *logger) offOrNone(o uint64) string {
	if o == 0 {
		return "none"
	}
	return l.off(o)
}

// at prints a true time like a log line's prefix (ms since the start).
func (l *logger) at(t int64) string { return fmt.Sprintf("%.3f", float64(t-epoch0)/1e6) }

// skew prints a clock offset in ms, signed.
func (l *logger) skew(d int64) string { return fmt.Sprintf("%+.3fms", float64(d)/1e6) }

func (l *logger) pos(p core.Position) string { return fmt.Sprintf("%s:%d", l.off(p.Offset), p.Index) }

// sid prints a stripe id as p<producer>s<seq>.
func sid(id stripe.ID) string { return fmt.Sprintf("p%ds%d", int(id.Producer[0])-1, id.Seq) }

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// nodeList prints ensemble positions compactly: "0,2,5" (callers add the
// "n" of "n0,2,5" where it helps).
func nodeList(ns []int) string {
	b := make([]byte, 0, 2*len(ns))
	for i, n := range ns {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Append(b, n)
	}
	return string(b)
}
