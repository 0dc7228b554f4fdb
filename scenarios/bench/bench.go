// Package bench is `raidq bench`: the same publishing workload against
// raidq (six `raidq node` processes, 4+2 Reed-Solomon, W=4) and, with
// VsJetStream, against NATS JetStream (three `raidq natsd` processes — the
// nats-server embedded in raidq — with an R3 file stream), one after the
// other in one run, and a side-by-side report: throughput, ack latency
// (HdrHistogram p50/p99/p999/max), the longest time without any ack while
// nodes (raidq) or the stream leader (JetStream) are SIGKILLed half-way,
// bytes on disk per payload byte, CPU seconds and peak RSS per process
// (/proc).
//
// The fsync setting is the same on both sides: Fsync means raidq's
// default (fsync before OK) against JetStream's sync_interval "always";
// without it, raidq --no-fsync against JetStream's default (flush every
// 2 minutes).
//
// Publishers: C goroutines, each publishing synchronously (send, wait for
// the ack, send the next) or, with Async, keeping Window sends
// outstanding. raidq's publishers share one producer (the API batches
// concurrent sends); JetStream's publishers have one connection each (as
// `nats bench js pub --clients C`). Clients connect to servers that are
// not killed. A publish that fails or times out is retried until it is
// acknowledged; its latency counts from the first attempt.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raidq/raidq"
)

// Config are the knobs of a run (the flags of `raidq bench`).
type Config struct {
	// Binary is the raidq binary that runs the node and natsd processes
	// (built from this tree; the CLI passes its own executable).
	Binary string
	// NodeBinary, if set, runs the raidq nodes instead of Binary (an
	// older build, to measure a change to the node side).
	NodeBinary string
	// Dir holds the data directories; empty: a temporary directory,
	// removed afterwards.
	Dir string

	Messages   int
	Size       int
	Publishers int
	Async      bool
	Window     int // outstanding sends per publisher with Async (default 64)
	Partitions int // partitions of the raidq topic (default 1, like one stream)
	Warmup     int // messages sent before measuring (default 500)
	// Settle is the pause between the warm-up and the measured workload
	// (default 3s: raidq's fan-out readers take their leases and catch up
	// with the warm-up, so the run measures the steady state).
	Settle time.Duration

	Fsync     bool
	Kill      int           // raidq: nodes SIGKILLed half-way; JetStream: the stream leader
	Slow      int           // raidq nodes answering SlowDelay late
	SlowDelay time.Duration // default 50ms

	VsJetStream bool
	// VsKafka also runs the workload with kgo through a Kafka gateway
	// (kafka.go) and compares it with the native run.
	VsKafka bool
	// KafkaLinger is the kgo producer's linger (kgo.ProducerLinger);
	// negative: kgo's default (10ms).
	KafkaLinger time.Duration
	// KafkaInflight bounds kgo's produce requests in flight per broker
	// (max.in.flight.requests.per.connection; 0: kgo's default, 5 when
	// idempotent).
	KafkaInflight int
	// JetStreamOnly skips raidq (JetStream alone, for comparing baselines).
	JetStreamOnly bool

	// ProfileDir, if set, receives CPU profiles: the benchmark process
	// (client-<system>.pprof) and every server process (<cmd>-<pid>.pprof).
	ProfileDir string

	// DiskProbe measures, before the workloads and with fsync on, what
	// the disk alone allows for lock-step fdatasyncs of 1, 3 and 6
	// writers (DiskProbe): the ceiling the run is under on this machine.
	DiskProbe bool

	// ServerProcs, if > 0, is GOMAXPROCS for every server process of both
	// systems (raidq nodes and nats-servers); 0 leaves Go's default (one
	// per CPU). It is for testing whether co-location skews the result:
	// at Go's default, six raidq nodes run twelve schedulers on a 2-CPU
	// machine and JetStream's three servers six (docs/bench.md, round 4:
	// at 1, raidq's nodes used ~15% less CPU there; JetStream did not gain).
	ServerProcs int

	// Latency is the raidq topic's latency profile (raidq.ProfileParams):
	// "default" or "low"; empty: default. JetStream has no such setting.
	Latency string

	// The read-side modes (read.go). Any of them replaces the publishing
	// workload; each runs against raidq and, with VsJetStream, JetStream.
	//
	// E2E measures send→delivery latency (e2e.go); CatchUp the time one
	// consumer takes to read a backlog of Messages (catchup.go); FanOut,
	// for each count in it, the CPU that many readers of one partition
	// cost (fanout.go).
	E2E     bool
	CatchUp bool
	FanOut  []int
	// Rate paces the read modes' producer in messages per second. 0: E2E
	// sends synchronously, one message at a time, and FanOut sends at
	// DefaultFanOutRate.
	Rate float64
	// E2ETimeout is how long deliveries are awaited after the last send
	// (E2E and FanOut) before the missing ones count as lost (default 10s).
	E2ETimeout time.Duration

	// Direct: the raidq client reaches each node through the node's own
	// NATS server (raidq.WithDirectNodes).
	Direct bool
	// ProducerOptions are passed to the raidq producer.
	ProducerOptions []raidq.ProducerOption

	Logger *slog.Logger // the raidq client's logs (default: discard)
	Log    io.Writer    // progress lines (default: discard)
}

func (c *Config) defaults() error {
	if c.Messages <= 0 {
		c.Messages = 20000
	}
	if c.Size <= 0 {
		c.Size = 1024
	}
	if c.Publishers <= 0 {
		c.Publishers = 16
	}
	if c.Window <= 0 {
		c.Window = 64
	}
	if !c.Async && !c.readModes() {
		c.Window = 1 // the catch-up fill keeps Window outstanding
	}
	if c.Partitions <= 0 {
		c.Partitions = 1
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	} else if c.Warmup == 0 {
		c.Warmup = 500
	}
	if c.Settle == 0 {
		c.Settle = 3 * time.Second
	}
	if c.SlowDelay <= 0 {
		c.SlowDelay = 50 * time.Millisecond
	}
	if c.E2ETimeout == 0 {
		c.E2ETimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	switch {
	case c.Binary == "":
		return errors.New("bench: the raidq binary is required")
	case c.Size < 8 || c.Size > 1<<20:
		return fmt.Errorf("--size %d: must be 8..1048576 bytes", c.Size)
	case c.Kill < 0 || c.Slow < 0 || c.Kill+c.Slow > 6:
		return fmt.Errorf("--kill %d and --slow %d: must be >= 0 and together at most 6", c.Kill, c.Slow)
	case c.ServerProcs < 0:
		return fmt.Errorf("--gomaxprocs %d: must be >= 0 (0: Go's default)", c.ServerProcs)
	case c.Kill > 2:
		return fmt.Errorf("--kill %d: raidq's 4+2 code tolerates 2 dead nodes; more would fail sends, not measure them", c.Kill)
	}
	if _, err := raidq.ProfileParams(c.Latency); err != nil {
		return fmt.Errorf("--latency %q: want default or low", c.Latency)
	}
	return c.checkRead()
}

// Validate checks c as Run would, without running anything: the error
// Run would return for these settings, or nil.
func (c Config) Validate() error { return c.defaults() }

func (c *Config) logf(format string, args ...any) {
	fmt.Fprintf(c.Log, format+"\n", args...)
}

// Report is the outcome of a run (the JSON of `raidq bench --json`).
type Report struct {
	Raidq *Result `json:"raidq,omitempty"`
	// RaidqHealthy and RaidqHealthyAfter are raidq without the slow nodes,
	// run before and after the slow phase when Slow is set, so that the
	// slow-node p99 compares with healthy p99s of the same run (ratio
	// "slow_p99_vs_healthy": against their mean) and a drift between the
	// phases shows ("healthy_p99_after_vs_before").
	RaidqHealthy      *Result `json:"raidq_healthy,omitempty"`
	RaidqHealthyAfter *Result `json:"raidq_healthy_after,omitempty"`
	JetStream         *Result `json:"jetstream,omitempty"`
	// Kafka is the workload sent by kgo through a Kafka gateway (VsKafka);
	// KafkaVsNative compares it with Raidq.
	Kafka         *Result          `json:"kafka,omitempty"`
	KafkaVsNative *KafkaComparison `json:"kafka_vs_native,omitempty"`
	// Async names the --async comparison's figures (async.go).
	Async *AsyncFigures `json:"async,omitempty"`
	// Read are the read-side modes' figures by name (read.go), ReadSetup
	// says what each measured and FanOut has one row per fan-out phase.
	Read      map[string]float64 `json:"read,omitempty"`
	ReadSetup []string           `json:"read_setup,omitempty"`
	FanOut    []FanOutRow        `json:"fanout,omitempty"`
	Ratio     map[string]float64 `json:"ratio,omitempty"`
	// Disk is the disk probe (Config.DiskProbe): 1, 3 and 6 writers.
	Disk     []DiskProbe  `json:"disk_probe,omitempty"`
	Workload WorkloadInfo `json:"workload"`
}

// WorkloadInfo repeats the workload's parameters in the report.
type WorkloadInfo struct {
	Messages   int    `json:"messages"`
	Size       int    `json:"size"`
	Publishers int    `json:"publishers"`
	Mode       string `json:"mode"`
	Fsync      bool   `json:"fsync"`
	Kill       int    `json:"kill"`
	Slow       int    `json:"slow"`
	SlowMs     int64  `json:"slow_delay_ms,omitempty"`
	Partitions int    `json:"partitions"`
	// Latency is the raidq topic's latency profile.
	Latency string `json:"latency_profile"`
	// Rate is the read modes' send rate (0: E2E sends one at a time).
	Rate float64 `json:"rate_msgs_s,omitempty"`
	CPUs int     `json:"cpus"`
	// ServerProcs is GOMAXPROCS of the server processes (0: Go's default).
	ServerProcs int    `json:"server_gomaxprocs,omitempty"`
	Started     string `json:"started"`
}

// Run runs the benchmark: raidq, then (with VsJetStream) JetStream.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "raidq-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
		abs, err := filepath.Abs(cfg.ProfileDir)
		if err != nil {
			return nil, err
		}
		cfg.ProfileDir = abs
	}
	r := newReport(&cfg)
	if cfg.readModes() {
		return r, runRead(ctx, &cfg, dir, r)
	}
	var err error
	if cfg.DiskProbe && cfg.Fsync {
		if r.Disk, err = probeDisks(&cfg, dir); err != nil {
			return nil, err
		}
	}
	slow := !cfg.JetStreamOnly && cfg.Slow > 0
	if slow {
		cfg.logf("raidq: first without slow nodes, for the healthy p99")
		if r.RaidqHealthy, err = runHealthy(ctx, cfg, filepath.Join(dir, "healthy"), "raidq-healthy"); err != nil {
			return nil, err
		}
	}
	if !cfg.JetStreamOnly {
		if r.Raidq, err = runRaidq(ctx, &cfg, dir); err != nil {
			return nil, err
		}
		cfg.logf("%s", r.Raidq)
	}
	if slow {
		cfg.logf("raidq: again without slow nodes, so that a drift between the phases shows")
		if r.RaidqHealthyAfter, err = runHealthy(ctx, cfg, filepath.Join(dir, "healthy-after"), "raidq-healthy-after"); err != nil {
			return nil, err
		}
	}
	if cfg.VsKafka && !cfg.JetStreamOnly {
		if r.Kafka, err = runKafka(ctx, &cfg, filepath.Join(dir, "kafka")); err != nil {
			return nil, err
		}
		cfg.logf("%s", r.Kafka)
	}
	if cfg.VsJetStream || cfg.JetStreamOnly {
		if r.JetStream, err = runJetStream(ctx, &cfg, dir); err != nil {
			return nil, err
		}
		cfg.logf("%s", r.JetStream)
	}
	if r.Raidq != nil && r.JetStream != nil {
		r.Ratio = ratios(r.Raidq, r.JetStream)
	}
	r.slowRatios()
	r.compareKafka()
	r.Async = asyncFigures(&cfg, r)
	return r, nil
}

// newReport is an empty report of a run with cfg (its workload filled in).
func newReport(cfg *Config) *Report {
	mode := "sync"
	if cfg.Async {
		mode = fmt.Sprintf("async, window %d", cfg.Window)
	}
	if cfg.readModes() {
		mode = cfg.readModeName()
	}
	r := &Report{Workload: WorkloadInfo{Messages: cfg.Messages, Size: cfg.Size, Publishers: cfg.Publishers, Mode: mode,
		Fsync: cfg.Fsync, Kill: cfg.Kill, Slow: cfg.Slow, Partitions: cfg.Partitions, Latency: cmp.Or(cfg.Latency, "default"),
		Rate: cfg.Rate, CPUs: runtime.NumCPU(), ServerProcs: cfg.ServerProcs, Started: time.Now().UTC().Format(time.RFC3339)}}
	if cfg.Slow > 0 {
		r.Workload.SlowMs = cfg.SlowDelay.Milliseconds()
	}
	return r
}

// runHealthy runs raidq as cfg says but with no slow or killed nodes, in
// dir, naming the result system.
func runHealthy(ctx context.Context, cfg Config, dir, system string) (*Result, error) {
	cfg.Slow, cfg.Kill = 0, 0
	res, err := runRaidq(ctx, &cfg, dir)
	if err != nil {
		return nil, err
	}
	res.System = system
	cfg.logf("%s", res)
	return res, nil
}

// slowRatios adds the slow-node ratios: the slow phase's p99 against the
// mean of the healthy p99s before and after it (a single healthy phase if
// only one ran), and the second healthy p99 against the first.
func (r *Report) slowRatios() {
	if r.Raidq == nil || r.RaidqHealthy == nil || r.RaidqHealthy.AckP99Ms <= 0 {
		return
	}
	if r.Ratio == nil {
		r.Ratio = make(map[string]float64)
	}
	healthy := r.RaidqHealthy.AckP99Ms
	if a := r.RaidqHealthyAfter; a != nil && a.AckP99Ms > 0 {
		healthy = (healthy + a.AckP99Ms) / 2
		r.Ratio["healthy_p99_after_vs_before"] = round3(a.AckP99Ms / r.RaidqHealthy.AckP99Ms)
	}
	r.Ratio["slow_p99_vs_healthy"] = round3(r.Raidq.AckP99Ms / healthy)
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// DiskPaceMsgsS is the 6-writer disk probe's rounds per second times
// raidq's records per stripe: what raidq would reach if its nodes cost no
// CPU and the disk, shared by all six on this machine, were the only
// limit (0 without a probe or a raidq result). A stripe needs six
// write+fdatasync pairs, and this machine's one disk performs them one at
// a time; on one machine per node they would run in parallel.
func (r *Report) DiskPaceMsgsS() float64 {
	if len(r.Disk) == 0 || r.Raidq == nil || r.Raidq.RecordsPerStripe == 0 {
		return 0
	}
	p := r.Disk[len(r.Disk)-1]
	if p.Writers != 6 {
		return 0
	}
	return p.RoundsPerS * r.Raidq.RecordsPerStripe
}

// serverEnv is the environment added to every server process.
func (c *Config) serverEnv() []string {
	var env []string
	if c.ProfileDir != "" {
		env = append(env, "RAIDQ_CPUPROFILE="+c.ProfileDir)
	}
	if c.ServerProcs > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", c.ServerProcs))
	}
	return env
}

// probeDisks runs the disk probe for 1 writer, 3 (JetStream R3, quorum 2)
// and 6 (raidq 4+2, W=4), each writing one raidq shard of this workload's
// stripes per round.
func probeDisks(cfg *Config, dir string) ([]DiskProbe, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A sync round's stripe holds every publisher's record; an async
	// stripe is capped by the producer's batch bytes (256 KiB default).
	batch := min(cfg.Publishers*cfg.Window*(cfg.Size+16), 256<<10)
	shard := (batch+3)/4 + 64
	var out []DiskProbe
	for _, s := range []struct{ w, need int }{{1, 1}, {3, 2}, {6, 4}} {
		p, err := probeDisk(dir, s.w, s.need, shard, 400)
		if err != nil {
			return nil, err
		}
		cfg.logf("disk probe: %s", p)
		out = append(out, p)
	}
	return out, nil
}

// measure runs the workload against t, sampling the server processes and
// this process around it; kill runs once half of the messages are acked.
func measure(ctx context.Context, cfg *Config, system string, procs []*tracked, t target, kill func(*recorder)) (*recorder, usage, error) {
	if cfg.ProfileDir != "" {
		f, err := os.Create(filepath.Join(cfg.ProfileDir, "client-"+system+".pprof"))
		if err != nil {
			return nil, usage{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err == nil {
			defer pprof.StopCPUProfile()
		}
	}
	w := workload{messages: cfg.Messages, size: cfg.Size, publishers: cfg.Publishers, async: cfg.Async, window: cfg.Window}
	self := &tracked{pid: os.Getpid()}
	for _, p := range procs {
		p.begin()
	}
	self.begin()
	busy0, busyOK := machineBusy()
	var rec *recorder
	var onHalf func()
	killed := make(chan struct{})
	if cfg.Kill > 0 {
		onHalf = func() { defer close(killed); kill(rec) }
	} else {
		close(killed)
	}
	cfg.logf("%s: %d messages of %d bytes, %d publishers (%s)", system, cfg.Messages, cfg.Size, cfg.Publishers,
		map[bool]string{false: "sync", true: fmt.Sprintf("async, window %d", cfg.Window)}[cfg.Async])
	rec = newRecorder(cfg.Messages, onHalf)
	w.runWith(ctx, t, rec)
	if cfg.Kill > 0 && rec.acked.Load() < max(rec.half, 1) {
		close(killed) // never reached half-way (everything failed)
	}
	<-killed
	self.finish()
	busy1, _ := machineBusy()
	for _, p := range procs {
		p.finish()
	}
	if err := ctx.Err(); err != nil {
		return nil, usage{}, err
	}
	u := usage{client: self.end.CPU - self.start.CPU}
	if busyOK {
		u.machine = busy1 - busy0
	}
	return rec, u, nil
}

// usage is the CPU time of this process and of the whole machine during
// a workload.
type usage struct{ client, machine time.Duration }

// ratioFields are the fields compared as raidq / jetstream.
var ratioFields = []struct {
	name string
	get  func(*Result) float64
}{
	{"throughput_msgs_s", func(r *Result) float64 { return r.ThroughputMsgsS }},
	{"ack_p50_ms", func(r *Result) float64 { return r.AckP50Ms }},
	{"ack_p99_ms", func(r *Result) float64 { return r.AckP99Ms }},
	{"ack_p999_ms", func(r *Result) float64 { return r.AckP999Ms }},
	{"ack_max_ms", func(r *Result) float64 { return r.AckMaxMs }},
	{"longest_ack_gap_ms", func(r *Result) float64 { return r.LongestAckGapMs }},
	{"kill_gap_ms", func(r *Result) float64 { return r.KillGapMs }},
	{"disk_bytes_per_payload_byte", func(r *Result) float64 { return r.DiskBytesPerPayloadByte }},
	{"cpu_s", func(r *Result) float64 { return r.CPUS }},
	{"peak_rss_mb", func(r *Result) float64 { return r.PeakRSSMB }},
}

// ratios is raidq / jetstream for every compared field.
func ratios(a, b *Result) map[string]float64 {
	m := make(map[string]float64)
	for _, f := range ratioFields {
		if y := f.get(b); y != 0 {
			m[f.name] = round3(f.get(a) / y)
		}
	}
	return m
}

// PrintTable writes the side-by-side table.
func (r *Report) PrintTable(w io.Writer) {
	if r.Read != nil {
		r.printRead(w)
		return
	}
	printWorkload(w, r.Workload)
	cols, head := r.columns()
	r.printMetrics(w, cols, head)
	r.KafkaVsNative.print(w)
	r.Async.print(w)
	r.printNotes(w)
	printSetups(w, cols)
}

// printWorkload writes the one-line description of the workload.
func printWorkload(w io.Writer, wl WorkloadInfo) {
	fs := "fsync on both sides (raidq fsync before OK, JetStream sync_interval always)"
	if !wl.Fsync {
		fs = "no fsync (raidq --no-fsync, JetStream default sync_interval 2 min)"
	}
	fmt.Fprintf(w, "workload: %d messages of %d B, %d publishers (%s), %s", wl.Messages, wl.Size, wl.Publishers, wl.Mode, fs)
	if wl.Kill > 0 {
		fmt.Fprintf(w, ", --kill %d", wl.Kill)
	}
	if wl.Slow > 0 {
		fmt.Fprintf(w, ", --slow %d (%d ms)", wl.Slow, wl.SlowMs)
	}
	fmt.Fprintf(w, "; %d CPUs", wl.CPUs)
	if wl.ServerProcs > 0 {
		fmt.Fprintf(w, ", servers at GOMAXPROCS=%d", wl.ServerProcs)
	}
	fmt.Fprintln(w)
}

// columns returns the results the table shows, in column order, and the
// table's header line (without its trailing tab).
func (r *Report) columns() ([]*Result, string) {
	var cols []*Result
	head := "metric"
	for _, res := range []*Result{r.RaidqHealthy, r.Raidq, r.RaidqHealthyAfter, r.Kafka, r.JetStream} {
		if res != nil {
			cols = append(cols, res)
			head += "\t" + res.System
		}
	}
	if r.JetStream != nil && r.Raidq != nil {
		head += "\traidq/jetstream"
	}
	return cols, head
}

// metricTable writes one metric per row, one column per result, plus
// the raidq/jetstream ratio column when both ran.
type metricTable struct {
	tw     *tabwriter.Writer
	cols   []*Result
	ratio  map[string]float64
	ratios bool // show the ratio column
}

// row writes the metric name, get of every column and the ratio under
// ratioKey (blank if there is none).
func (t *metricTable) row(name, ratioKey string, get func(*Result) string) {
	line := name
	for _, c := range t.cols {
		line += "\t" + get(c)
	}
	if t.ratios {
		if v, ok := t.ratio[ratioKey]; ok {
			line += fmt.Sprintf("\t%.2fx", v)
		} else {
			line += "\t"
		}
	}
	fmt.Fprintln(t.tw, line+"\t")
}

// f0, f1 and f2 format a metric with 0, 1 and 2 decimals.
func f0(f func(*Result) float64) func(*Result) string {
	return func(x *Result) string { return fmt.Sprintf("%.0f", f(x)) }
}

func f1(f func(*Result) float64) func(*Result) string {
	return func(x *Result) string { return fmt.Sprintf("%.1f", f(x)) }
}

func f2(f func(*Result) float64) func(*Result) string {
	return func(x *Result) string { return fmt.Sprintf("%.2f", f(x)) }
}

// printMetrics writes the aligned table of metrics under head.
func (r *Report) printMetrics(w io.Writer, cols []*Result, head string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, head+"\t")
	t := &metricTable{tw: tw, cols: cols, ratio: r.Ratio, ratios: r.JetStream != nil && r.Raidq != nil}
	t.row("acked / failed", "", func(x *Result) string { return fmt.Sprintf("%d / %d", x.Acked, x.Failed) })
	t.row("throughput msgs/s", "throughput_msgs_s", f0(func(x *Result) float64 { return x.ThroughputMsgsS }))
	t.row("throughput MB/s", "", f1(func(x *Result) float64 { return x.ThroughputMBS }))
	t.row("ack p50 ms", "ack_p50_ms", f2(func(x *Result) float64 { return x.AckP50Ms }))
	t.row("ack p99 ms", "ack_p99_ms", f2(func(x *Result) float64 { return x.AckP99Ms }))
	t.row("ack p999 ms", "ack_p999_ms", f2(func(x *Result) float64 { return x.AckP999Ms }))
	t.row("ack max ms", "ack_max_ms", f1(func(x *Result) float64 { return x.AckMaxMs }))
	t.row("longest ack gap ms", "longest_ack_gap_ms", f1(func(x *Result) float64 { return x.LongestAckGapMs }))
	if r.Workload.Kill > 0 {
		t.row("  longest gap at the kill ms", "kill_gap_ms", f1(func(x *Result) float64 { return x.KillGapMs }))
	}
	t.row("disk B / payload B", "disk_bytes_per_payload_byte", f2(func(x *Result) float64 { return x.DiskBytesPerPayloadByte }))
	t.row("CPU s (servers+client)", "cpu_s", f1(func(x *Result) float64 { return x.CPUS }))
	t.row("  servers / client", "", func(x *Result) string { return fmt.Sprintf("%.1f / %.1f", x.ServerCPUS, x.ClientCPUS) })
	t.row("other processes' CPU s", "", f1(func(x *Result) float64 { return x.OtherCPUS }))
	t.row("peak RSS MB (largest)", "peak_rss_mb", f0(func(x *Result) float64 { return x.PeakRSSMB }))
	t.row("peak RSS MB (sum)", "", f0(func(x *Result) float64 { return x.TotalRSSMB }))
	t.row("retries", "", func(x *Result) string { return fmt.Sprint(x.Retries) })
	if r.Raidq != nil && r.Raidq.Stripes > 0 {
		t.row("records per stripe", "", func(x *Result) string {
			if x.Stripes == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f", x.RecordsPerStripe)
		})
	}
	tw.Flush()
}

// printNotes writes the disk probes, the disk-pace estimate and the
// slow-node ratio, each when there is one.
func (r *Report) printNotes(w io.Writer) {
	for _, p := range r.Disk {
		fmt.Fprintf(w, "disk alone: %s\n", p)
	}
	if c := r.DiskPaceMsgsS(); c > 0 {
		fmt.Fprintf(w, "raidq at the disk's pace: %.0f rounds/s of 6 writers × %.1f records per stripe = %.0f msgs/s, with no CPU work at all\n",
			r.Disk[len(r.Disk)-1].RoundsPerS, r.Raidq.RecordsPerStripe, c)
		if f := r.Raidq.ThroughputMsgsS / c; f >= 0.8 {
			fmt.Fprintf(w, "note: raidq ran at %.0f%% of the disk's pace: the six nodes' shared disk, not their CPU, was the limit of this run\n", 100*f)
		}
	}
	if v, ok := r.Ratio["slow_p99_vs_healthy"]; ok {
		fmt.Fprintf(w, "raidq ack p99 with %d slow nodes / healthy: %.2fx", r.Workload.Slow, v)
		if d, ok := r.Ratio["healthy_p99_after_vs_before"]; ok {
			fmt.Fprintf(w, " (against the mean of the healthy phases before and after it; healthy after / before: %.2fx)", d)
		}
		fmt.Fprintln(w)
	}
}

// printSetups writes each result's setup, processes, kills, slow nodes
// and first error.
func printSetups(w io.Writer, cols []*Result) {
	for _, c := range cols {
		var ps []string
		for _, p := range c.Processes {
			k := ""
			if p.Killed {
				k = " killed"
			}
			ps = append(ps, fmt.Sprintf("%s %.1fs %.0fMB%s", p.Name, p.CPUS, p.PeakRSSMB, k))
		}
		fmt.Fprintf(w, "%s: %s\n  processes: %s\n", c.System, c.Setup, strings.Join(ps, ", "))
		if len(c.Killed) > 0 {
			fmt.Fprintf(w, "  killed at %.0f ms: %s\n", c.KillAtMs, strings.Join(c.Killed, ", "))
		}
		if len(c.Slow) > 0 {
			fmt.Fprintf(w, "  slow: %s\n", strings.Join(c.Slow, ", "))
		}
		if c.FirstError != "" {
			fmt.Fprintf(w, "  first error: %s\n", c.FirstError)
		}
	}
}
