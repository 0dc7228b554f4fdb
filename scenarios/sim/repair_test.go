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
