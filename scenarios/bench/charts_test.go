package bench

import (
	"os"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// fakeResult is a result of n acks, one per ms, each lat long, with its
// nodes killed at killMs (0: none).
func fakeResult(system string, n int, lat time.Duration, killMs float64) *Result {
	res := &Result{System: system, KillAtMs: killMs,
		hist: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)}
	for i := range n {
		_ = res.hist.RecordValue(lat.Microseconds())
		res.acks = append(res.acks, ackSample{At: time.Duration(i) * time.Millisecond, Latency: lat})
	}
	return res
}

// TestKillLinesSpanAllResults: a kill line covers every system's latency
// range, so a fast system's kill mark is not hidden under its own points
// and the slower system's (it spanned only its own range before).
func TestKillLinesSpanAllResults(t *testing.T) {
	fast := fakeResult("raidq", 100, time.Millisecond, 50)
	slow := fakeResult("jetstream", 100, 5*time.Second, 70)
	if lo, hi := latencyRange([]*Result{fast, slow}); lo != 1 || hi != 5000 {
		t.Fatalf("kill lines span %v..%v ms; want 1..5000", lo, hi)
	}
	r := &Report{Raidq: fast, JetStream: slow}
	files, err := r.WriteCharts(t.TempDir(), "k")
	if err != nil || len(files) != 3 {
		t.Fatalf("charts %v: %v", files, err)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
