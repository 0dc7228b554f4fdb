package core

import "testing"

// TestBeyondHorizon: a walk may not settle a range later than the
// horizon before the peers' median clock, whatever this node's own clock
// says (a clock stepped ahead marked the real future verified: the shards
// the node then refused there were never rebuilt, raidq drill clock-step).
func TestBeyondHorizon(t *testing.T) {
	const s = int64(1e9)
	peers := []PeerScan{{Heard: true, Clock: 100 * s}, {Heard: true, Clock: 101 * s}, {Heard: true, Clock: 99 * s},
		{Heard: false, Clock: 500 * s}, {Heard: true, Clock: 0}}
	if pt, ok := PeersTime(peers); !ok || pt != 100*s {
		t.Fatalf("peers' time %d %v, want the median of the heard clocks, 100 s", pt, ok)
	}
	if BeyondHorizon(uint64(99*s), peers, s) {
		t.Errorf("a range ending at the horizon is within it")
	}
	if !BeyondHorizon(uint64(99*s+1), peers, s) {
		t.Errorf("a range past the peers' horizon is settled")
	}
	if BeyondHorizon(uint64(1000*s), []PeerScan{{Heard: false, Clock: 1}}, s) {
		t.Errorf("with no peer heard there is no cluster time to judge by")
	}
	// One fast peer of three does not move it.
	fast := []PeerScan{{Heard: true, Clock: 100 * s}, {Heard: true, Clock: 100 * s}, {Heard: true, Clock: 200 * s}}
	if !BeyondHorizon(uint64(150*s), fast, s) {
		t.Errorf("one fast peer moved cluster time")
	}
}
