package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raidq/raidq/scenarios/cluster"
)

// The raidq binary (it runs the nodes and nats-servers) is built once per
// test run and shared by the tests that start processes.
var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func benchBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts six raidq nodes and three nats-servers")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "raidq-bench-bin-")
		if binErr == nil {
			binPath, binErr = cluster.Build(binDir)
		}
	})
	if binErr != nil {
		t.Fatalf("build raidq: %v", binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// readConfig is a tiny read-side run against both systems.
func readConfig(t *testing.T, messages int) Config {
	return Config{Binary: benchBinary(t), Messages: messages, Publishers: 4, Fsync: true, VsJetStream: true,
		Settle: time.Millisecond, Direct: true}
}

// runRead runs cfg and fails the test on error.
func runReadTest(t *testing.T, cfg Config) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// wantFigures checks that every name is in fig and > 0.
func wantFigures(t *testing.T, fig map[string]float64, names ...string) {
	t.Helper()
	for _, n := range names {
		if v, ok := fig[n]; !ok || v <= 0 {
			t.Errorf("%s = %v (present %v), want > 0", n, v, ok)
		}
	}
}

// wantEqual checks fig[a] == want for every name.
func wantEqual(t *testing.T, fig map[string]float64, want float64, names ...string) {
	t.Helper()
	for _, n := range names {
		if fig[n] != want {
			t.Errorf("%s = %v, want %v", n, fig[n], want)
		}
	}
}

// TestReadE2E: every reader of both systems gets every acked message
// once, with its latency percentiles, and the table shows them.
func TestReadE2E(t *testing.T) {
	cfg := readConfig(t, 200)
	cfg.E2E = true
	r := runReadTest(t, cfg)
	f := r.Read
	for _, p := range []string{"e2e_", "e2e_sub_", "js_e2e_", "js_e2e_sub_"} {
		wantFigures(t, f, p+"p50_ms", p+"p99_ms", p+"p999_ms", p+"max_ms")
		wantEqual(t, f, 200, p+"delivered")
		wantEqual(t, f, 0, p+"lost")
	}
	wantEqual(t, f, 200, "e2e_acked", "js_e2e_acked")
	wantFigures(t, f, "e2e_stripes", "e2e_p99_ratio", "e2e_sub_p99_ratio")
	if _, ok := f["e2e_retried_pct"]; !ok {
		t.Error("no e2e_retried_pct")
	}
	var b strings.Builder
	r.PrintTable(&b)
	for _, want := range []string{"raidq.Consumer", "JetStream ordered push consumer", "stripes retried"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestReadE2ELowRate: the low-latency profile at a fixed rate, raidq only.
func TestReadE2ELowRate(t *testing.T) {
	cfg := readConfig(t, 300)
	cfg.E2E, cfg.VsJetStream, cfg.Latency, cfg.Rate = true, false, "low", 1000
	r := runReadTest(t, cfg)
	wantEqual(t, r.Read, 300, "e2e_delivered", "e2e_sub_delivered")
	wantFigures(t, r.Read, "e2e_p99_ms", "e2e_send_msgs_s")
	if _, ok := r.Read["js_e2e_sent"]; ok || r.Workload.Latency != "low" {
		t.Errorf("JetStream ran or the profile is %q: %v", r.Workload.Latency, r.Read)
	}
}

// TestReadCatchUp: each reader reads the whole backlog.
func TestReadCatchUp(t *testing.T) {
	cfg := readConfig(t, 300)
	cfg.CatchUp = true
	r := runReadTest(t, cfg)
	f := r.Read
	wantEqual(t, f, 300, "catchup_backlog", "js_catchup_backlog", "catchup_delivered", "js_catchup_ordered_delivered",
		"js_catchup_pull_delivered")
	for _, p := range []string{"catchup_", "js_catchup_ordered_", "js_catchup_pull_"} {
		wantFigures(t, f, p+"msgs_s", p+"seconds")
		wantEqual(t, f, 0, p+"lost")
	}
	wantFigures(t, f, "catchup_ratio", "catchup_pull_ratio")
}

// TestReadFanOut: one phase per count and reader kind, every reader gets
// every message, and the ratios against one reader are there.
func TestReadFanOut(t *testing.T) {
	const n = 300
	cfg := readConfig(t, n)
	cfg.FanOut, cfg.Rate = []int{0, 1, 2}, 1000
	r := runReadTest(t, cfg)
	if len(r.FanOut) != 10 {
		t.Fatalf("%d fan-out rows, want 2 systems × (1 + 2 + 2): %+v", len(r.FanOut), r.FanOut)
	}
	for _, row := range r.FanOut {
		if row.Produced != n || row.Delivered != n*row.Count || row.Lost != 0 {
			t.Errorf("row %+v: want %d produced, %d delivered, none lost", row, n, n*row.Count)
		}
	}
	// Present, not necessarily > 0: a phase of 0.3 s may use less CPU
	// than /proc's 10 ms tick on some process.
	for _, name := range []string{"fanout_cpu_ratio_2", "fanout_consumer_cpu_ratio_2", "js_fanout_cpu_ratio_2",
		"js_fanout_consumer_cpu_ratio_2", "fanout_node_cpu_us_per_msg_0", "js_fanout_server_cpu_us_per_msg_0",
		"fanout_read_node_cpu_us_per_msg_2", "js_fanout_consumer_p99_ms_2"} {
		if _, ok := r.Read[name]; !ok {
			t.Errorf("no %s in %v", name, r.Read)
		}
	}
}

// TestCheckRead: the read modes refuse what they cannot measure, with
// the flag in the error.
func TestCheckRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"rate alone", func(c *Config) { c.Rate = 10 }, "--rate"},
		{"rate with catch-up", func(c *Config) { c.CatchUp, c.Rate = true, 10 }, "--rate"},
		{"negative rate", func(c *Config) { c.E2E, c.Rate = true, -1 }, "--rate"},
		{"kill", func(c *Config) { c.E2E, c.Kill = true, 1 }, "--kill"},
		{"kafka", func(c *Config) { c.CatchUp, c.VsKafka = true, true }, "--kafka"},
		{"async", func(c *Config) { c.E2E, c.Async = true, true }, "--async"},
		{"size", func(c *Config) { c.E2E, c.Size = true, 12 }, "--size"},
		{"fanout range", func(c *Config) { c.FanOut = []int{1, MaxFanOut + 1} }, "--fanout"},
		{"fanout twice", func(c *Config) { c.FanOut = []int{4, 4} }, "given twice"},
		{"latency", func(c *Config) { c.Latency = "fast" }, "--latency"},
	} {
		c := Config{Binary: "x"}
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
	ok := Config{Binary: "x", E2E: true, CatchUp: true, FanOut: []int{0, 1, 16}, Rate: 100, Latency: "low"}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid read config: %v", err)
	}
}

// stamped is a stamped message of index idx sent d ago.
func stamped(idx uint64, d time.Duration) []byte {
	m := stampedMessage(32, idx)
	binary.BigEndian.PutUint64(m, uint64(time.Now().Add(-d).UnixNano()))
	return m
}

// TestDeliverySink: a sink counts each measured message once, ignores
// other phases, tracks warm-ups, and counts lost only what was acked.
func TestDeliverySink(t *testing.T) {
	s := newSink(true, 10, 3)
	now := time.Now()
	s.observe(stamped(10, 5*time.Millisecond), now)
	s.observe(stamped(10, 5*time.Millisecond), now) // duplicate
	s.observe(stamped(12, 7*time.Millisecond), now)
	s.observe(stamped(13, time.Millisecond), now) // another phase
	s.observe(stamped(warmBit|2, 0), now)
	s.observe([]byte("short"), now)
	if !s.waitWarm(context.Background(), 2, time.Now()) || s.waitWarm(context.Background(), 3, time.Now()) {
		t.Error("warm-up 2 seen, 3 not: waitWarm disagrees")
	}
	st := &sendStats{acked: []bool{true, true, false}, nAcked: 2}
	s.setExpect(2)
	if !s.waitDone(context.Background(), time.Now(), 0) {
		t.Error("two messages arrived: done should be closed")
	}
	fig := make(map[string]float64)
	s.put(fig, "x_", st)
	if fig["x_delivered"] != 2 || fig["x_duplicates"] != 1 || fig["x_lost"] != 1 {
		t.Errorf("figures %v: want 2 delivered, 1 duplicate, 1 lost (index 11, acked)", fig)
	}
	if p := fig["x_max_ms"]; p < 6 || p > 1000 {
		t.Errorf("max latency %v ms, want about 7", p)
	}
}

// fakeTarget acknowledges every send at once, failing those fail says.
type fakeTarget struct {
	mu   sync.Mutex
	sent int
	fail func(msg []byte) bool
}

func (f *fakeTarget) send(_ context.Context, _ int, msg []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	if f.fail != nil && f.fail(msg) {
		return errors.New("refused")
	}
	return nil
}

func (f *fakeTarget) sendAsync(pub int, msg []byte, done func(error)) {
	err := f.send(context.Background(), pub, msg)
	go done(err)
}

// TestSendPaced: every message is sent once, in sync and paced modes,
// and failures are counted, not acked.
func TestSendPaced(t *testing.T) {
	odd := func(msg []byte) bool { return binary.BigEndian.Uint64(msg[8:])%2 == 1 }
	for _, rate := range []float64{0, 1e6} {
		ft := &fakeTarget{fail: odd}
		st := sendPaced(context.Background(), ft, 64, 100, 50, rate, 10)
		if ft.sent != 50 || st.nAcked != 25 || st.failed != 25 || !st.acked[0] || st.acked[1] {
			t.Errorf("rate %v: sent %d, acked %d, failed %d", rate, ft.sent, st.nAcked, st.failed)
		}
	}
}

// TestFanOutFigures: ratios against one reader, read shares against none.
func TestFanOutFigures(t *testing.T) {
	rows := []FanOutRow{
		{System: "raidq", Readers: "none", Count: 0, ServerCPUUsPerMsg: 100},
		{System: "raidq", Readers: "subscribers", Count: 1, ServerCPUUsPerMsg: 150},
		{System: "raidq", Readers: "consumers", Count: 1, ServerCPUUsPerMsg: 160},
		{System: "raidq", Readers: "subscribers", Count: 16, ServerCPUUsPerMsg: 165},
		{System: "raidq", Readers: "consumers", Count: 16, ServerCPUUsPerMsg: 800},
		{System: "jetstream", Readers: "consumers", Count: 16, ServerCPUUsPerMsg: 90},
	}
	fig := make(map[string]float64)
	fanOutFigures(fig, rows)
	want := map[string]float64{"fanout_cpu_ratio_16": 1.1, "fanout_consumer_cpu_ratio_16": 5, "fanout_node_cpu_us_per_msg_0": 100,
		"fanout_read_node_cpu_us_per_msg_16": 65, "fanout_consumer_read_node_cpu_us_per_msg_16": 700,
		"js_fanout_consumer_server_cpu_us_per_msg_16": 90}
	for k, v := range want {
		if fig[k] != v {
			t.Errorf("%s = %v, want %v", k, fig[k], v)
		}
	}
	if _, ok := fig["js_fanout_consumer_cpu_ratio_16"]; ok {
		t.Error("a ratio without a count of 1")
	}
	var b strings.Builder
	(&Report{Read: fig, FanOut: rows}).printFanOut(&b)
	if !strings.Contains(b.String(), "5.00x") || !strings.Contains(b.String(), "raidq.Consumers") {
		t.Errorf("table:\n%s", b.String())
	}
}
