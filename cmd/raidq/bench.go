package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/scenarios/bench"
)

// benchFlags are the flags of `raidq bench`.
type benchFlags struct {
	cfg              bench.Config
	vs, linger       string
	kafkaLinger      string
	kafkaInflight    int
	quiet, direct    bool
	pipeline, repeat int
	fanout           string
	o                benchOutput
}

func benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark raidq node processes, side by side with NATS JetStream (--vs jetstream)",
		Long: `bench starts six raidq node processes (this binary) and publishes --messages
messages of --size bytes from --publishers concurrent publishers, each
waiting for its ack (or keeping --window sends outstanding with --async).
With --vs jetstream it then runs the same workload against three nats-server
processes (this binary's embedded server, "raidq natsd") with an R3 file
stream, and prints both side by side: throughput, ack latency
p50/p99/p999/max, the longest time without any ack, bytes on disk per
payload byte, CPU seconds and peak RSS per process.

--fsync=true (default) compares raidq's fsync-before-OK with JetStream's
sync_interval always; --fsync=false compares raidq --no-fsync with
JetStream's default. --kill N SIGKILLs N raidq nodes half-way (and the
JetStream stream leader); --slow N makes N raidq nodes answer 50 ms late
and runs raidq healthy before and after that phase: the slow p99 is
compared with the mean of the two healthy p99s, and their own ratio shows
how much the machine drifted between phases.
--out DIR writes PNG charts. Every process runs on this machine: the
numbers compare the two systems under the same load, nothing more.

Read side (instead of the publishing workload; any of them, each against
fresh servers of both systems; JSON "read", docs/bench.md "Read side"):
--e2e measures send→delivery latency at a raidq.Consumer and at a NATS
subscriber of the nodes' deliver subject (JetStream: an ordered push
consumer and a core subscriber), sending one message at a time or at
--rate per second; --catchup fills a backlog of --messages and times one
consumer reading it from the earliest position (JetStream: an ordered
consumer and a pull consumer with acks); --fanout 1,4,16 measures the
CPU per message with that many readers of one partition. --latency low
creates the raidq topic with the low-latency profile.`,
		Example: `  raidq bench --vs jetstream
  raidq bench --vs jetstream --fsync=false --json
  raidq bench --vs jetstream --kill 2 --out docs/bench
  raidq bench --e2e --vs jetstream --messages 2000
  raidq bench --e2e --latency low --rate 500 --vs jetstream
  raidq bench --catchup --vs jetstream --messages 1000000
  raidq bench --fanout 1,4,16 --vs jetstream --messages 10000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, &f)
		},
	}
	f.register(cmd)
	return cmd
}

// register defines the bench flags on cmd.
func (b *benchFlags) register(cmd *cobra.Command) {
	c := &b.cfg
	f := cmd.Flags()
	f.StringVar(&b.vs, "vs", "", "also run the workload against: jetstream (three nats-server processes, R3 stream)")
	f.BoolVar(&c.VsKafka, "kafka", false, "also run the workload with kgo through a `raidq kafka` gateway in front of six fresh nodes, and compare CPU per message with the native producer (JSON: kafka_vs_native)")
	f.StringVar(&b.kafkaLinger, "kafka-linger", "", "with --kafka: the kgo producer's linger (default: kgo's, 10ms)")
	f.IntVar(&b.kafkaInflight, "kafka-inflight", 0, "with --kafka: kgo's produce requests in flight per broker, 1..5 (default: kgo's, 5)")
	f.IntVar(&c.Messages, "messages", 20000, "messages to publish (per system)")
	f.IntVar(&c.Size, "size", 1024, "message size in bytes")
	f.IntVar(&c.Publishers, "publishers", 16, "concurrent publishers")
	f.BoolVar(&c.Async, "async", false, "publish asynchronously, --window sends outstanding per publisher")
	f.IntVar(&c.Window, "window", 64, "outstanding sends per publisher with --async")
	f.BoolVar(&c.Fsync, "fsync", true, "fsync before acknowledging (raidq default; JetStream sync_interval always); false: raidq --no-fsync, JetStream default")
	f.IntVar(&c.Kill, "kill", 0, "raidq nodes to SIGKILL half-way (JetStream: the stream leader is killed)")
	f.IntVar(&c.Slow, "slow", 0, "raidq nodes that answer --slow-delay late")
	f.DurationVar(&c.SlowDelay, "slow-delay", 50*time.Millisecond, "how late the --slow nodes answer")
	f.IntVar(&c.Partitions, "partitions", 1, "partitions of the raidq topic")
	f.IntVar(&c.Warmup, "warmup", 500, "messages published before measuring")
	f.DurationVar(&c.Settle, "settle", 3*time.Second, "pause between the warm-up and the measured workload")
	f.StringVar(&b.linger, "linger", "", "raidq producer linger (default: the producer's)")
	f.IntVar(&b.pipeline, "pipeline", 0, "raidq producer: stripes awaiting their ack before new batches linger (0: default; -1: always linger)")
	f.BoolVar(&c.DiskProbe, "disk-probe", true, "with fsync on: first measure lock-step write+fdatasync of 1, 3 and 6 writers on the data directory's disk (the ceiling this machine sets)")
	f.IntVar(&b.repeat, "repeat", 1, "run the whole comparison this many times and print the median, min and max of every ratio (charts get -<run> in their prefix; the JSON becomes {\"runs\": [...], \"ratio\": {...}})")
	f.IntVar(&c.ServerProcs, "gomaxprocs", 0, "GOMAXPROCS of every server process, raidq's and JetStream's (0: Go's default, one per CPU)")
	f.BoolVar(&b.direct, "direct", true, "raidq client: reach each node through its own NATS server (false: through the server the client connects to)")
	f.BoolVar(&b.o.asJSON, "json", false, `print {"raidq": {...}, "jetstream": {...}, "ratio": {...}}`)
	f.StringVar(&b.o.jsonFile, "json-file", "", "also write the JSON report to this file")
	f.StringVar(&b.o.out, "out", "", "write PNG charts to this directory")
	f.StringVar(&b.o.prefix, "prefix", "bench", "file name prefix of the charts")
	f.StringVar(&c.Dir, "data", "", "data directory (default: a temporary one, removed afterwards)")
	f.StringVar(&c.ProfileDir, "cpuprofile", "", "write CPU profiles of the client and of every server process to this directory")
	f.BoolVarP(&b.quiet, "quiet", "q", false, "no progress lines on stderr")
	f.BoolVar(&c.JetStreamOnly, "jetstream-only", false, "run only the JetStream side")
	_ = f.MarkHidden("jetstream-only")
	f.StringVar(&c.Latency, "latency", "default", "latency profile of the raidq topic: default or low (raidq.ProfileParams)")
	f.BoolVar(&c.E2E, "e2e", false, "read side: send→delivery latency p50/p99/p99.9 at a raidq.Consumer and a deliver-subject subscriber (JetStream: ordered push consumer, core subscriber); lost messages")
	f.BoolVar(&c.CatchUp, "catchup", false, "read side: fill a backlog of --messages, then time one consumer reading it from the earliest position (msgs/s, CPU per message)")
	f.StringVar(&b.fanout, "fanout", "", "read side: comma-separated reader counts, e.g. 1,4,16: CPU per message with that many subscribers, then consumers, of one partition (0: the producer alone)")
	f.Float64Var(&c.Rate, "rate", 0, fmt.Sprintf("--e2e and --fanout: send this many messages per second (0: --e2e sends one at a time, --fanout %d/s)", bench.DefaultFanOutRate))
	f.DurationVar(&c.E2ETimeout, "e2e-timeout", 10*time.Second, "--e2e and --fanout: how long to wait for deliveries after the last send before the missing ones count as lost")
	f.StringVar(&c.NodeBinary, "node-binary", "", "run the raidq nodes from this binary (another build, for before/after)")
	_ = f.MarkHidden("node-binary")
}

// runBench is `raidq bench`: one comparison (or --repeat of them), its
// table or JSON on stdout, charts and the JSON file as asked.
func runBench(cmd *cobra.Command, f *benchFlags) error {
	if err := f.complete(); err != nil {
		return err
	}
	if err := f.cfg.Validate(); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "raidq bench runs its servers without authentication, listening on 127.0.0.1 only")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if f.repeat > 1 {
		return benchSeries(ctx, cmd, f.cfg, f.repeat, f.o)
	}
	r, err := bench.Run(ctx, f.cfg)
	if err != nil {
		return err
	}
	if err := writeBenchFiles(r, f.o, r); err != nil {
		return err
	}
	if f.o.asJSON {
		return encodeJSON(cmd, r)
	}
	r.PrintTable(cmd.OutOrStdout())
	return nil
}

// complete checks the flags and turns them into f.cfg: the system to
// compare with, producer options, this binary for the nodes, the log.
func (f *benchFlags) complete() error {
	cfg := &f.cfg
	switch strings.ToLower(f.vs) {
	case "":
	case "jetstream", "js", "nats":
		cfg.VsJetStream = true
	default:
		return usageErr(fmt.Errorf("--vs %q: only jetstream is supported", f.vs))
	}
	if f.repeat < 1 {
		return usageErr(fmt.Errorf("--repeat %d: must be >= 1", f.repeat))
	}
	if f.kafkaInflight < 0 || f.kafkaInflight > 5 {
		return usageErr(fmt.Errorf("--kafka-inflight %d: 1..5 (an idempotent producer allows at most 5), 0 for kgo's default", f.kafkaInflight))
	}
	cfg.KafkaInflight = f.kafkaInflight
	if err := f.completeRead(); err != nil {
		return err
	}
	cfg.KafkaLinger = -1
	if f.kafkaLinger != "" {
		d, err := time.ParseDuration(f.kafkaLinger)
		if err != nil || d < 0 {
			return usageErr(fmt.Errorf("--kafka-linger %q: a duration >= 0", f.kafkaLinger))
		}
		cfg.KafkaLinger = d
	}
	if f.pipeline != 0 {
		cfg.ProducerOptions = append(cfg.ProducerOptions, raidq.WithPipeline(f.pipeline))
	}
	cfg.Direct = f.direct
	if f.linger != "" {
		d, err := time.ParseDuration(f.linger)
		if err != nil {
			return usageErr(fmt.Errorf("--linger: %w", err))
		}
		cfg.ProducerOptions = append(cfg.ProducerOptions, raidq.WithLinger(d))
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary (it runs the nodes): %w", err)
	}
	cfg.Binary = bin
	if !f.quiet {
		cfg.Log = os.Stderr
	}
	return nil
}

// completeRead parses --fanout and checks the read-side flags the
// bench package cannot see (--out, --e2e-timeout 0); bench.Config checks
// the rest.
func (f *benchFlags) completeRead() error {
	cfg := &f.cfg
	if s := strings.TrimSpace(f.fanout); s != "" {
		for _, part := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(part))
			if err != nil {
				return usageErr(fmt.Errorf("--fanout %q: want comma-separated reader counts, e.g. 1,4,16", f.fanout))
			}
			cfg.FanOut = append(cfg.FanOut, n)
		}
	}
	read := cfg.E2E || cfg.CatchUp || len(cfg.FanOut) > 0
	if cfg.E2ETimeout <= 0 {
		return usageErr(fmt.Errorf("--e2e-timeout %v: must be > 0", cfg.E2ETimeout))
	}
	if read && f.o.out != "" {
		return usageErr(errors.New("--out: the charts are of the publishing workload; not with --e2e, --catchup or --fanout"))
	}
	return nil
}

// benchOutput is where a bench run's results go besides the table.
type benchOutput struct {
	out, prefix, jsonFile string
	asJSON                bool
}

// writeBenchFiles writes r's charts (to o.out) and doc (to o.jsonFile).
func writeBenchFiles(r *bench.Report, o benchOutput, doc any) error {
	if o.out != "" && r != nil {
		files, err := r.WriteCharts(o.out, o.prefix)
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "charts:", strings.Join(files, " "))
	}
	if o.jsonFile == "" || doc == nil {
		return nil
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(o.jsonFile, append(b, '\n'), 0o644)
}

func encodeJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// benchSeries is `raidq bench --repeat N`: every run's table as it ends,
// then the spread of the ratios.
func benchSeries(ctx context.Context, cmd *cobra.Command, cfg bench.Config, n int, o benchOutput) error {
	s, err := bench.RunSeries(ctx, cfg, n)
	if err != nil {
		return err
	}
	for i, r := range s.Runs {
		ro := o
		ro.prefix, ro.jsonFile = fmt.Sprintf("%s-%d", o.prefix, i+1), ""
		if err := writeBenchFiles(r, ro, nil); err != nil {
			return err
		}
		if !o.asJSON {
			fmt.Fprintf(cmd.OutOrStdout(), "== run %d of %d\n", i+1, n)
			r.PrintTable(cmd.OutOrStdout())
		}
	}
	if err := writeBenchFiles(nil, benchOutput{jsonFile: o.jsonFile}, s); err != nil {
		return err
	}
	if o.asJSON {
		return encodeJSON(cmd, s)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "== %d runs\n", n)
	s.PrintSummary(cmd.OutOrStdout())
	return nil
}
