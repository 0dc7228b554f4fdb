package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raidq/raidq/scenarios/cluster"
)

// TestBenchCommand runs `raidq bench --vs jetstream` with tiny numbers
// (and --kill 1, --out) so the command, its JSON and its charts cannot rot.
func TestBenchCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six raidq nodes and three nats-servers")
	}
	bin := testBinary(t)
	out := t.TempDir()
	p, err := cluster.StartProc("bench", bin, []string{"bench", "--vs", "jetstream", "--messages", "200", "--warmup", "20",
		"--publishers", "4", "--kill", "1", "--fsync=false", "--json", "--out", out, "--quiet"})
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(150 * time.Second)
	if err != nil {
		p.Kill()
		t.Fatalf("%v\n%s", err, p.Tail(30))
	}
	if code != 0 {
		t.Fatalf("exit code %d\n%s", code, p.Tail(30))
	}
	var r struct {
		Raidq, JetStream map[string]any
		Ratio            map[string]float64
	}
	if err := json.Unmarshal([]byte(p.Stdout()), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, p.Stdout())
	}
	for name, res := range map[string]map[string]any{"raidq": r.Raidq, "jetstream": r.JetStream} {
		if res == nil {
			t.Fatalf("no %s result:\n%s", name, p.Stdout())
		}
		if res["acked"] != float64(200) {
			t.Errorf("%s: acked %v of 200 (first error %v)", name, res["acked"], res["first_error"])
		}
		for _, f := range []string{"throughput_msgs_s", "ack_p50_ms", "ack_p99_ms", "ack_p999_ms", "ack_max_ms",
			"longest_ack_gap_ms", "disk_bytes_per_payload_byte", "cpu_s", "peak_rss_mb"} {
			if v, ok := res[f].(float64); !ok || v <= 0 {
				t.Errorf("%s: %s = %v, want > 0", name, f, res[f])
			}
		}
		if k, _ := res["killed"].([]any); len(k) != 1 {
			t.Errorf("%s: killed %v, want one", name, res["killed"])
		}
	}
	if r.Ratio["throughput_msgs_s"] <= 0 {
		t.Errorf("ratio: %v", r.Ratio)
	}
	for _, c := range []string{"latency", "timeline", "throughput"} {
		if st, err := os.Stat(filepath.Join(out, "bench-"+c+".png")); err != nil || st.Size() == 0 {
			t.Errorf("chart %s: %v", c, err)
		}
	}
}
