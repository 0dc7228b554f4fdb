package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// TestBenchReadFlags: every read-side flag is checked before anything
// starts, with an error naming it.
func TestBenchReadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fanout", "1,x"}, "--fanout"},
		{[]string{"--fanout", "1,65"}, "--fanout 65"},
		{[]string{"--e2e", "--rate", "-5"}, "--rate"},
		{[]string{"--rate", "100"}, "--rate: only with --e2e or --fanout"},
		{[]string{"--catchup", "--rate", "100"}, "--rate"},
		{[]string{"--e2e", "--latency", "fast"}, "--latency"},
		{[]string{"--latency", "fast"}, "--latency"},
		{[]string{"--e2e", "--e2e-timeout", "0s"}, "--e2e-timeout"},
		{[]string{"--e2e", "--out", t.TempDir()}, "--out"},
		{[]string{"--catchup", "--kill", "1"}, "--kill"},
		{[]string{"--e2e", "--async"}, "--async"},
		{[]string{"--fanout", "4", "--kafka"}, "--kafka"},
	} {
		cmd := benchCmd()
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench %v: error %v, want one naming %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchReadCommand runs `raidq bench --e2e --vs jetstream` with the
// low-latency profile at a fixed rate, tiny numbers, and checks the JSON
// names of the read side.
func TestBenchReadCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six raidq nodes and three nats-servers")
	}
	bin := testBinary(t)
	p, err := cluster.StartProc("bench", bin, []string{"bench", "--e2e", "--vs", "jetstream", "--messages", "200",
		"--latency", "low", "--rate", "500", "--json", "--quiet"})
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
		Read      map[string]float64
		ReadSetup []string `json:"read_setup"`
		Workload  map[string]any
	}
	if err := json.Unmarshal([]byte(p.Stdout()), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, p.Stdout())
	}
	for _, f := range []string{"e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms", "e2e_sub_p50_ms", "e2e_sub_p99_ms", "e2e_sub_p999_ms",
		"js_e2e_p50_ms", "js_e2e_p99_ms", "js_e2e_p999_ms", "js_e2e_sub_p99_ms", "e2e_delivered", "js_e2e_delivered", "e2e_stripes"} {
		if v, ok := r.Read[f]; !ok || v <= 0 {
			t.Errorf("read.%s = %v, want > 0", f, r.Read[f])
		}
	}
	for _, f := range []string{"e2e_lost", "e2e_sub_lost", "js_e2e_lost", "js_e2e_sub_lost"} {
		if v, ok := r.Read[f]; !ok || v != 0 {
			t.Errorf("read.%s = %v (present %v), want 0", f, v, ok)
		}
	}
	if _, ok := r.Read["e2e_retried_pct"]; !ok {
		t.Error("no read.e2e_retried_pct")
	}
	if r.Workload["latency_profile"] != "low" || len(r.ReadSetup) != 2 {
		t.Errorf("workload %v, setup %v", r.Workload, r.ReadSetup)
	}
}
