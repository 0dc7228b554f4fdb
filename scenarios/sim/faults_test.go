package sim

import (
	"testing"
	"time"
)

// TestSimFaultKinds runs each newer fault kind on its own over a few seeds
// and checks both that nothing broke and that the kind really happened
// (a knob that silently stops doing anything would keep TestSimSeeds
// green for nothing).
func TestSimFaultKinds(t *testing.T) {
	cases := []struct {
		name   string
		config func(c *Config)
		ran    func(a tally) bool
	}{
		{"fail-fast crashes answer at once", func(c *Config) { c.FailFast, c.Crashes = 1, 4 },
			func(a tally) bool { return a.refused > 0 }},
		{"clean long outage", func(c *Config) {
			c.LongCrashes, c.MaxLongCrash, c.Crashes, c.DropRate = 1, 4*time.Second, 0, 0
		}, func(a tally) bool { return a.long > 0 }},
		{"long outages among other faults: in doubt, then delivered late", func(c *Config) {
			c.LongCrashes, c.MaxLongCrash, c.FailFast, c.DropRate, c.Crashes = 2, 5*time.Second, 0.5, 0.03, 4
		}, func(a tally) bool { return a.long > 0 && a.late > 0 }},
		{"quorum loss: writes fail clearly, readers wait", func(c *Config) { c.QuorumLoss, c.FailFast = 2500*time.Millisecond, 0.5 },
			func(a tally) bool { return a.quorumLoss > 0 && a.excused > 0 && a.stalls > 0 }},
		{"clocks off by seconds", func(c *Config) {
			c.NodeOffset, c.ReaderSkew, c.FastReader, c.NodeSkew = 3*time.Second, 2*time.Second, 3*time.Second, 100*time.Millisecond
		}, func(a tally) bool { return a.shorts > 0 && a.ahead > 0 }},
		{"reader clock past SkipBehind", func(c *Config) { c.FastReader = 13 * time.Second },
			func(a tally) bool { return a.probes > 0 }},
		// With no skip at all the core's far-behind path is dead code here:
		// the nodes must answer After and report their clocks.
		{"readers far behind and late: probes skip", func(c *Config) { c.ReaderBehind, c.ReaderLate = 30*time.Second, 12*time.Second },
			func(a tally) bool { return a.skips > 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var total tally
			for seed := uint64(1); seed <= 8; seed++ {
				cfg := DefaultConfig(seed)
				tc.config(&cfg)
				res := Run(t, cfg)
				total.add(&res)
				if res.Broken() {
					reportFailure(t, seed, &res)
					return
				}
			}
			if !tc.ran(total) {
				t.Fatalf("the fault kind did not show: %s", total)
			}
			t.Logf("%s", total)
		})
	}
}
