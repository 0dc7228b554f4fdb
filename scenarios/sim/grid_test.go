package sim

import (
	"strings"
	"testing"
)

// TestSimOldProducerFailsLoudly: a producer that ignores the topic's
// offset grid (one older than it) has its writes refused with BAD_REQUEST
// by every owner, so its sends fail, each after its attempts, naming the
// refusal; it never spins, no node stores a slot off the grid, and the
// grid check (checkGrid) names the producer's offsets.
func TestSimOldProducerFailsLoudly(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		c := DefaultConfig(seed)
		c.Crashes, c.DropRate, c.DupRate, c.SlowNodes, c.Stripes = 0, 0, 0, 0, 5
		c.inject.ignoreGrid = true
		res := Run(t, c)
		offGrid := false
		if res.Failed == 0 || res.Acked+res.Failed != res.Stripes {
			t.Fatalf("seed %d: %d of %d stripes failed, %d acked", seed, res.Failed, res.Stripes, res.Acked)
		}
		for _, v := range res.Violations {
			switch {
			case strings.Contains(v, "liveness") && strings.Contains(v, "BAD_REQUEST"):
			case strings.Contains(v, "attempted at") && strings.Contains(v, "off the"):
				offGrid = true
			case strings.HasPrefix(v, "... more"):
			default:
				t.Fatalf("seed %d: unexpected violation: %s", seed, v)
			}
		}
		if !offGrid {
			t.Fatalf("seed %d: the grid check missed the off-grid attempts: %v", seed, res.Violations)
		}
	}
}
