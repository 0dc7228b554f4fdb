package core

import (
	"fmt"
	"testing"
)

// readLog is everything a reader produced while driven.
type readLog struct {
	values    []string // delivered record values, in order
	delivered []int64  // reader time of each delivery
	inDoubt   []InDoubtReport
	doubtAt   []int64
	corrupt   []CorruptReport
	voids     int
	dups      int
	stalls    int
	rescans   []Scan
	rescanAt  []int64
}

// deafFunc says which nodes do not answer sc (reader time now).
type deafFunc func(sc Scan, now int64, r *Reader) []int

func deafTo(nodes ...int) deafFunc { return func(Scan, int64, *Reader) []int { return nodes } }

// drive runs r against w from now until until, in steps of step: at each
// step it runs every scan Next asks for, answered by the nodes deaf allows.
func drive(r *Reader, w world, now, until, step int64, deaf deafFunc) *readLog {
	l := &readLog{}
	for ; now < until; now += step {
		for {
			sc, ok := r.Next(now)
			if !ok {
				break
			}
			if sc.Rescan {
				l.rescans = append(l.rescans, sc)
				l.rescanAt = append(l.rescanAt, now)
			}
			out := r.Apply(now, sc, w.answer(sc, deaf(sc, now, r)...))
			l.add(now, out)
			if out.Stalled != "" {
				break
			}
		}
	}
	return l
}

func (l *readLog) add(now int64, out Output) {
	for _, d := range out.Deliveries {
		l.values = append(l.values, string(d.Record.Value))
		l.delivered = append(l.delivered, now)
	}
	for _, d := range out.InDoubt {
		l.inDoubt = append(l.inDoubt, d)
		l.doubtAt = append(l.doubtAt, now)
	}
	l.corrupt = append(l.corrupt, out.Corrupt...)
	l.voids += out.Voids
	l.dups += out.Duplicates
	if out.Stalled != "" {
		l.stalls++
	}
}

// startNow is a reader time whose first scan reaches base+100ms.
func startNow() int64 { return int64(base) + int64(params().ReadDelay) + 100*ms }

// newTestReader starts a reader at base.
func newTestReader() *Reader { return NewReader(DefaultReaderConfig(params()), Position{Offset: base}) }

// wantValues fails unless got equals the concatenated values of the stripes.
func wantValues(t *testing.T, got []string, stripes ...[]string) {
	t.Helper()
	var want []string
	for _, s := range stripes {
		want = append(want, s...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered %v\nwant      %v", got, want)
	}
}
