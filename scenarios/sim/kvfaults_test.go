package sim

import (
	"flag"
	"testing"
	"time"

	"github.com/raidq/raidq/actors/drillhooks"
)

// Configs and tests of the KV's listing and read faults (kv.go: partial
// listings, stale reads), and the past bugs of the shipped group member
// they catch. The faults stay out of SeedConfig for now: the shipped
// member does not survive all of them yet (TestSimKVGaps).

var flagKVGaps = flag.Bool("sim.kvgaps", false, "run TestSimKVGaps: seeds the shipped group member fails under partial listings and stale reads")

// partialGroupConfig: groupConfig's three members, a third of whose
// listings run for up to 400 ms and miss the keys written meanwhile (a
// heartbeat lands in such a listing about every third time).
func partialGroupConfig(seed uint64) Config {
	c := groupConfig(seed)
	c.KV = KVConfig{PartialLists: 0.3, ListTime: 400 * time.Millisecond}
	return c
}

// staleGroupConfig: three members with short sessions, two KV cut-offs of
// up to 5 s, a crash, a KV stall, lost write replies, and for 4 s after
// each stall or cut-off half the reads answered from the KV as it was
// when the fault began (a server continued after SIGSTOP, a lagging
// replica answering direct gets).
func staleGroupConfig(seed uint64) Config {
	c := groupConfig(seed)
	c.Group.Session = time.Duration(3+seed%4) * time.Second
	c.Group.CutOffs, c.Group.MaxCut, c.Group.Crashes = 2, 5*time.Second, 1
	c.KV = KVConfig{Stalls: 1, MaxStall: 4 * time.Second, LostAcks: 0.02, MaxStale: 10 * time.Second, StaleFor: 4 * time.Second}
	return c
}

// staleLeaseConfig: leaseConfig's holders over a KV whose listings may be
// partial and whose reads are stale after its faults and in two random
// windows (the lease is read by Get and written by compare-and-set).
func staleLeaseConfig(seed uint64) Config {
	c := leaseConfig(seed)
	c.KV.PartialLists, c.KV.ListTime = 0.3, 400*time.Millisecond
	c.KV.MaxStale, c.KV.StaleFor, c.KV.StaleWindows = 10*time.Second, 4*time.Second, 2
	return c
}

// TestSimKVKinds: the lease holders survive partial listings and stale
// reads, and both happen.
func TestSimKVKinds(t *testing.T) {
	stale, partial := 0, 0
	for seed := uint64(1); seed <= 12; seed++ {
		res := Run(t, staleLeaseConfig(seed))
		if res.Broken() {
			reportFailure(t, seed, &res)
			return
		}
		stale += res.KVStaleReads
		partial += res.KVPartialLists
	}
	if stale == 0 {
		t.Fatal("no stale read in 12 seeds")
	}
	t.Logf("stale reads %d, partial listings %d", stale, partial)
}

// TestSimPastBugs re-creates fixed mistakes of the shipped group member
// and names seeds of the KV fault configs that catch them, each passing
// with the member as shipped.
//
// SkipConfirmMissing (before 1177bb4): a live member missing from a
// member listing is taken for gone. Under partial listings every one of
// seeds 1-20 of partialGroupConfig catches it (a member claims the
// partition another reads); 1, 2 and 4 also pass as shipped.
//
// The listing cut short by its deadline (before 5bb0df2) has no case: in
// the member as shipped every call of a round shares the round's context,
// so after a listing returned what it had at the deadline the next call
// (confirmMissing's Get, or the positions listing) fails at once and
// nothing is planned on it; re-creating the old bus/meta at the port
// changes nothing the checks can see.
func TestSimPastBugs(t *testing.T) {
	cases := []struct {
		name   string
		bug    drillhooks.GroupBugs
		config func(uint64) Config
		seeds  []uint64
	}{
		{"group: a live member missing from a partial listing taken for gone", drillhooks.GroupBugs{SkipConfirmMissing: true},
			partialGroupConfig, []uint64{1, 2, 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, seed := range tc.seeds {
				cfg := tc.config(seed)
				cfg.inject.group = tc.bug
				res := Run(t, cfg)
				if !res.Broken() {
					t.Fatalf("seed %d: the bug went unnoticed (%s)", seed, cfg)
				}
				t.Logf("seed %d: %s", seed, res.Violations[0])
				if fixed := Run(t, tc.config(seed)); fixed.Broken() {
					reportFailure(t, seed, &fixed)
				}
			}
		})
	}
}

// TestSimKVGaps (-sim.kvgaps) runs the seeds the shipped group member
// fails under the new KV faults; each breaks "one reader at a time" (a
// member claims the partition while another reads it, both deliver).
//
//   - partialGroupConfig 3, 7, 11, 18: a member's first listing, taken
//     as it joins, misses the others' heartbeat records (written while it
//     ran); confirmMissing re-reads only members the observer already
//     judged live, so it takes the owner named in the position record for
//     dead and claims. (1177bb4's fix covers a member's later listings
//     only; reading by key an owner missing from the listing would close
//     it.)
//   - staleGroupConfig 4, 22, 57, 138, 141: stale answers after a stall
//     or cut-off; e.g. 22: after a 3.6 s stall and a lost heartbeat reply
//     m0a35 lists members stale three times running, then claims p0 from
//     m2a46, which reads it, with the revision of a fresh positions
//     listing. Not analysed further yet.
func TestSimKVGaps(t *testing.T) {
	if !*flagKVGaps {
		t.Skip("known failures of the shipped member under partial listings and stale reads; run with -sim.kvgaps")
	}
	for _, c := range []struct {
		config func(uint64) Config
		seeds  []uint64
	}{{partialGroupConfig, []uint64{3, 7, 11, 18}}, {staleGroupConfig, []uint64{4, 22, 57, 138, 141}}} {
		for _, seed := range c.seeds {
			if res := Run(t, c.config(seed)); res.Broken() {
				t.Errorf("seed %d (%s): %s", seed, c.config(seed), res.Violations[0])
			}
		}
	}
}
