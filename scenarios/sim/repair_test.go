package sim

import (
	"testing"
	"time"
)

// repairConfig: the repair loop on, with long outages and lost messages,
// so that committed stripes miss shards, readers report some in doubt and
// nodes re-append them.
func repairConfig(seed uint64) Config {
	c := HardSeedConfig(seed, HardLongOutage)
	c.RepairEvery = 500 * time.Millisecond
	return c
}

// TestSimRepair: the repair loop rebuilds missing shards, re-appends
// in-doubt stripes, and leaves every acked stripe with n shards (or a
// write-once conflict) once every node is back (checkRepaired).
func TestSimRepair(t *testing.T) {
	var total tally
	for seed := uint64(1); seed <= 40; seed++ {
		res := Run(t, repairConfig(seed))
		total.add(&res)
		if res.Broken() {
			reportFailure(t, seed, &res)
			return
		}
	}
	if total.repaired == 0 || total.reappended == 0 {
		t.Fatalf("repair did nothing: %s", total)
	}
	t.Logf("repair: %s", total)
}

// TestSimRepairWipes: a wiped node's repair refills the time before its
// birth (the gap walk), leaving holes only where no stripe can be rebuilt.
func TestSimRepairWipes(t *testing.T) {
	var total tally
	for seed := uint64(1); seed <= 20; seed++ {
		c := wipeConfig(seed)
		c.RepairEvery = 700 * time.Millisecond
		res := Run(t, c)
		total.add(&res)
		if res.Broken() {
			reportFailure(t, seed, &res)
			return
		}
	}
	if total.repaired == 0 {
		t.Fatalf("repair refilled nothing: %s", total)
	}
	t.Logf("repair after wipes: %s", total)
}

// TestSimRepairReplays: the shipped repair loop runs in the bubble on
// goroutines of its own, so a seed replays only if nothing it does
// depends on the Go scheduler (bubble.go): 50 repair seeds (every tenth
// with wipes) run twice give the same op log, line for line.
func TestSimRepairReplays(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		cfg := repairConfig(seed)
		if seed%10 == 0 {
			cfg = wipeConfig(seed)
			cfg.RepairEvery = 300 * time.Millisecond
		}
		a, b := Run(t, cfg), Run(t, cfg)
		if len(a.Log) != len(b.Log) {
			t.Fatalf("seed %d: %d then %d log lines", seed, len(a.Log), len(b.Log))
		}
		for i := range a.Log {
			if a.Log[i] != b.Log[i] {
				t.Fatalf("seed %d: log line %d differs:\n%s\n%s", seed, i, a.Log[i], b.Log[i])
			}
		}
	}
}
