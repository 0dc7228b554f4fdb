package bench

import "testing"

// TestSlowRatiosUseBothHealthyPhases: the slow p99 is compared with the
// mean of the healthy p99s before and after it, and the drift between
// those two is reported; with one healthy phase, with that one.
func TestSlowRatiosUseBothHealthyPhases(t *testing.T) {
	r := &Report{RaidqHealthy: &Result{AckP99Ms: 2}, Raidq: &Result{AckP99Ms: 3.3}, RaidqHealthyAfter: &Result{AckP99Ms: 4}}
	r.slowRatios()
	if r.Ratio["slow_p99_vs_healthy"] != 1.1 || r.Ratio["healthy_p99_after_vs_before"] != 2 {
		t.Fatalf("ratios %v; want slow 1.1 (3.3 / mean 3), drift 2", r.Ratio)
	}
	r = &Report{RaidqHealthy: &Result{AckP99Ms: 2}, Raidq: &Result{AckP99Ms: 3}}
	r.slowRatios()
	if r.Ratio["slow_p99_vs_healthy"] != 1.5 || len(r.Ratio) != 1 {
		t.Fatalf("ratios %v; want only slow 1.5", r.Ratio)
	}
}
