package sim

import (
	"testing"
)

// TestSimGroupDeterministic: the shipped group member in the bubble
// replays: 100 seeds with a group (SeedConfig's, and the lossy-KV and
// lost-ack configs) run twice give the same op log, line for line.
func TestSimGroupDeterministic(t *testing.T) {
	n := 0
	for seed := uint64(1); n < 100; seed++ {
		cfg := SeedConfig(seed)
		switch {
		case cfg.Group.Members > 0:
		case seed%3 == 0:
			cfg = lossyGroupConfig(seed)
		case seed%3 == 1:
			cfg = lostAckGroupConfig(seed)
		default:
			continue
		}
		n++
		a, b := Run(t, cfg), Run(t, cfg)
		if len(a.Log) != len(b.Log) {
			t.Errorf("seed %d (%s): %d then %d log lines", seed, cfg, len(a.Log), len(b.Log))
		}
		for i := range a.Log {
			if a.Log[i] != b.Log[i] {
				t.Fatalf("seed %d (%s): log line %d differs:\n%s\n%s", seed, cfg, i, a.Log[i], b.Log[i])
			}
		}
	}
}
