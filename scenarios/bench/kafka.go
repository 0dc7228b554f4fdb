package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/scenarios/cluster"
)

// The Kafka side of `raidq bench --kafka` (Config.VsKafka): the same
// workload, sent by franz-go's kgo through a `raidq kafka` gateway
// process in front of six fresh `raidq node` processes set up as the
// native run's. The publishers share one kgo client as the native
// publishers share one raidq producer: sync publishers call ProduceSync,
// async ones keep Window records outstanding with Produce.
//
// CPU accounting is by process (/proc, as for the native run): the
// server side is the gateway plus the nodes, the client is this process
// (the workload and kgo). The native run's client is this process too
// (the workload and the raidq producer, which does the erasure coding and
// fan-out that the gateway does for Kafka clients), so the like-for-like
// comparison is gateway + nodes against native producer + nodes
// (kafka_cpu_ratio); nodes alone are reported as well.

// KafkaTargetRatio is the bound on kafka_cpu_ratio.
const KafkaTargetRatio = 1.3

// kgoTarget publishes through one kgo client shared by every publisher.
type kgoTarget struct{ cl *kgo.Client }

func (t kgoTarget) send(ctx context.Context, _ int, msg []byte) error {
	return t.cl.ProduceSync(ctx, &kgo.Record{Value: msg}).FirstErr()
}

func (t kgoTarget) sendAsync(_ int, msg []byte, done func(error)) {
	t.cl.Produce(context.Background(), &kgo.Record{Value: msg}, func(_ *kgo.Record, err error) { done(err) })
}

// batchCounter counts the record batches kgo wrote and their records
// (kgo.HookProduceBatchWritten); the gateway writes each as one stripe.
type batchCounter struct{ batches, records atomic.Int64 }

func (b *batchCounter) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	b.batches.Add(1)
	b.records.Add(int64(m.NumRecords))
}

// runKafka runs the workload through a Kafka gateway process in front of
// six `raidq node` processes of their own.
func runKafka(ctx context.Context, cfg *Config, dir string) (*Result, error) {
	const nodes = 6
	res := &Result{System: "kafka", Messages: cfg.Messages}
	c, err := newRaidqCluster(cfg, dir, nodes, res)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cfg.logf("kafka: starting %d node processes and a gateway", nodes)
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("kafka: start the nodes: %w", err)
	}
	killed, urls := raidqKills(cfg, c)
	for i := range cfg.Slow {
		res.Slow = append(res.Slow, c.Node(i).ID)
	}
	if err := createBenchTopic(ctx, cfg, c, urls); err != nil {
		return nil, err
	}
	gw, addr, err := startBenchGateway(cfg, c.Cluster(), urls)
	if err != nil {
		return nil, err
	}
	defer gw.Kill()
	res.Setup = "`raidq kafka` gateway process, kgo client (idempotent, acks=all, no compression" + kgoSetup(cfg) + ") → " + res.Setup
	batches := &batchCounter{}
	cl, err := kgo.NewClient(kgoOptions(cfg, addr, batches)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t := kgoTarget{cl: cl}
	warm, err := warmUp(wctx, cfg, t)
	if err != nil {
		return nil, fmt.Errorf("kafka: warm-up: %w\n%s", err, gw.Tail(10))
	}
	procs := make([]*tracked, 0, nodes+1)
	for _, n := range c.Nodes() {
		procs = append(procs, &tracked{name: n.ID, pid: n.Proc.Cmd.Process.Pid})
	}
	procs = append(procs, &tracked{name: "gateway", pid: gw.Cmd.Process.Pid})
	b0 := batches.batches.Load()
	rec, use, err := measure(ctx, cfg, "kafka", procs, t, func(rec *recorder) {
		killRaidqNodes(cfg, c, procs, killed, rec, res)
	})
	if err != nil {
		return nil, err
	}
	res.summarize(rec, cfg.Size)
	res.addProcs(procs, use.client, use.machine)
	if res.Stripes = int(batches.batches.Load() - b0); res.Stripes > 0 {
		res.RecordsPerStripe = float64(res.Acked) / float64(res.Stripes)
	}
	cl.Close()
	if _, err := gw.Stop(30 * time.Second); err != nil { // its profile is written on exit
		cfg.logf("kafka: stop the gateway: %v", err)
	}
	disk := stopRaidqNodes(cfg, c, killed)
	res.setDisk(disk, int64(res.Acked+warm)*int64(cfg.Size))
	return res, nil
}

// kgoOptions are the bench's kgo client options: seed addr, idempotent
// (kgo's default), acks=all, no compression (the payload is random and
// raidq's producer does not compress either), cfg.KafkaLinger, batches
// counted.
func kgoOptions(cfg *Config, addr string, batches *batchCounter) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ClientID("raidq-bench-kgo"), kgo.DefaultProduceTopic("bench"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.WithHooks(batches)}
	if cfg.KafkaLinger >= 0 {
		opts = append(opts, kgo.ProducerLinger(cfg.KafkaLinger))
	}
	if cfg.KafkaInflight > 0 {
		opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(cfg.KafkaInflight))
	}
	return opts
}

// kgoSetup describes the linger kgoOptions set.
func kgoSetup(cfg *Config) string {
	s := ", linger " + cfg.KafkaLinger.String()
	if cfg.KafkaLinger < 0 {
		s = ", linger 10ms (kgo's default)"
	}
	if cfg.KafkaInflight > 0 {
		s += fmt.Sprintf(", %d produce requests in flight", cfg.KafkaInflight)
	}
	return s
}

// createBenchTopic creates the "bench" topic through a client of urls
// (closed before the workload, so it costs this process nothing then).
func createBenchTopic(ctx context.Context, cfg *Config, c *cluster.Cluster, urls []string) error {
	cl, err := raidq.Connect(strings.Join(urls, ","), raidq.WithCluster(c.Cluster()), raidq.WithLogger(cfg.Logger),
		raidq.WithName("raidq-bench-admin"))
	if err != nil {
		return err
	}
	defer cl.Close()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := createTopic(tctx, cfg, cl); err != nil {
		return fmt.Errorf("kafka: create the topic: %w", err)
	}
	return nil
}

// startBenchGateway starts `raidq kafka` (cfg.Binary, the server
// environment: profiles, GOMAXPROCS) on a free port against urls and
// waits until it listens; it returns the process and its address.
func startBenchGateway(cfg *Config, clusterName string, urls []string) (*cluster.Proc, string, error) {
	port, err := cluster.FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"kafka", "--nats", strings.Join(urls, ","), "--cluster", clusterName, "--listen", addr,
		"--id", "bench-kgw", "--log-level", "warn"}
	p, err := cluster.StartProc("gateway", cfg.Binary, args, cfg.serverEnv()...)
	if err != nil {
		return nil, "", err
	}
	if err := p.WaitStderr("listening on", 60*time.Second); err != nil {
		p.Kill()
		return nil, "", fmt.Errorf("kafka: the gateway did not start: %w\n%s", err, p.Tail(10))
	}
	return p, addr, nil
}

// KafkaComparison is `raidq bench --kafka`'s side-by-side of the kgo
// producer through the gateway and the native raidq producer, from the
// same run. CPU figures are CPU time per acknowledged message during the
// measured workload.
type KafkaComparison struct {
	KafkaMsgsS  float64 `json:"kafka_msgs_s"`
	KafkaP50Ms  float64 `json:"kafka_p50_ms"`
	KafkaP99Ms  float64 `json:"kafka_p99_ms"`
	NativeMsgsS float64 `json:"native_msgs_s"`
	NativeP50Ms float64 `json:"native_p50_ms"`
	NativeP99Ms float64 `json:"native_p99_ms"`
	// KafkaServerCPUUsPerMsg is the gateway's and the nodes' CPU;
	// KafkaGatewayCPUUsPerMsg and KafkaNodesCPUUsPerMsg split it.
	KafkaServerCPUUsPerMsg  float64 `json:"kafka_server_cpu_us_per_msg"`
	KafkaGatewayCPUUsPerMsg float64 `json:"kafka_gateway_cpu_us_per_msg"`
	KafkaNodesCPUUsPerMsg   float64 `json:"kafka_nodes_cpu_us_per_msg"`
	// KgoClientCPUUsPerMsg is this process during the Kafka workload (the
	// workload and kgo).
	KgoClientCPUUsPerMsg float64 `json:"kgo_client_cpu_us_per_msg"`
	// NativeServerCPUUsPerMsg is the nodes' CPU in the native run;
	// NativeClientCPUUsPerMsg this process's (the workload and the raidq
	// producer); NativeCPUUsPerMsg both.
	NativeServerCPUUsPerMsg float64 `json:"native_server_cpu_us_per_msg"`
	NativeClientCPUUsPerMsg float64 `json:"native_client_cpu_us_per_msg"`
	NativeCPUUsPerMsg       float64 `json:"native_cpu_us_per_msg"`
	// KafkaCPURatio is gateway + nodes over native producer + nodes (the
	// issue's target: at most KafkaTargetRatio); KafkaServerVsNativeNodes
	// is gateway + nodes over the native run's nodes alone.
	KafkaCPURatio            float64 `json:"kafka_cpu_ratio"`
	KafkaServerVsNativeNodes float64 `json:"kafka_server_vs_native_nodes"`
	TargetMet                bool    `json:"target_met"`
	// Records per kgo batch (one stripe each at the gateway) and per
	// native stripe.
	KafkaRecordsPerBatch   float64 `json:"kafka_records_per_batch"`
	NativeRecordsPerStripe float64 `json:"native_records_per_stripe"`
}

// compareKafka fills r.KafkaVsNative and the kafka_* entries of r.Ratio
// (so `--repeat` reports their spread).
func (r *Report) compareKafka() {
	k, n := r.Kafka, r.Raidq
	if k == nil || n == nil || k.Acked == 0 || n.Acked == 0 {
		return
	}
	per := func(s float64, acked int) float64 { return round3(s * 1e6 / float64(acked)) }
	var gw float64
	for _, p := range k.Processes {
		if p.Name == "gateway" {
			gw += p.CPUS
		}
	}
	c := &KafkaComparison{KafkaMsgsS: k.ThroughputMsgsS, KafkaP50Ms: k.AckP50Ms, KafkaP99Ms: k.AckP99Ms,
		NativeMsgsS: n.ThroughputMsgsS, NativeP50Ms: n.AckP50Ms, NativeP99Ms: n.AckP99Ms,
		KafkaServerCPUUsPerMsg: per(k.ServerCPUS, k.Acked), KafkaGatewayCPUUsPerMsg: per(gw, k.Acked),
		KafkaNodesCPUUsPerMsg: per(k.ServerCPUS-gw, k.Acked), KgoClientCPUUsPerMsg: per(k.ClientCPUS, k.Acked),
		NativeServerCPUUsPerMsg: per(n.ServerCPUS, n.Acked), NativeClientCPUUsPerMsg: per(n.ClientCPUS, n.Acked),
		NativeCPUUsPerMsg: per(n.CPUS, n.Acked), KafkaRecordsPerBatch: k.RecordsPerStripe, NativeRecordsPerStripe: n.RecordsPerStripe}
	if c.NativeCPUUsPerMsg > 0 {
		c.KafkaCPURatio = round3(c.KafkaServerCPUUsPerMsg / c.NativeCPUUsPerMsg)
		c.TargetMet = c.KafkaCPURatio <= KafkaTargetRatio
	}
	if c.NativeServerCPUUsPerMsg > 0 {
		c.KafkaServerVsNativeNodes = round3(c.KafkaServerCPUUsPerMsg / c.NativeServerCPUUsPerMsg)
	}
	r.KafkaVsNative = c
	if r.Ratio == nil {
		r.Ratio = make(map[string]float64)
	}
	r.Ratio["kafka_cpu_ratio"] = c.KafkaCPURatio
	r.Ratio["kafka_server_vs_native_nodes"] = c.KafkaServerVsNativeNodes
	if n.ThroughputMsgsS > 0 {
		r.Ratio["kafka_msgs_s_vs_native"] = round3(k.ThroughputMsgsS / n.ThroughputMsgsS)
	}
	if n.AckP99Ms > 0 {
		r.Ratio["kafka_p99_vs_native"] = round3(k.AckP99Ms / n.AckP99Ms)
	}
}

// print writes the comparison (nothing for nil).
func (c *KafkaComparison) print(w io.Writer) {
	if c == nil {
		return
	}
	verdict := "met"
	if !c.TargetMet {
		verdict = "NOT met"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kafka gateway vs native producer\tkgo → gateway\tnative\tratio\t")
	fmt.Fprintf(tw, "msgs/s\t%.0f\t%.0f\t%.2fx\t\n", c.KafkaMsgsS, c.NativeMsgsS, c.KafkaMsgsS/max(c.NativeMsgsS, 1e-9))
	fmt.Fprintf(tw, "ack p50 / p99 ms\t%.2f / %.2f\t%.2f / %.2f\t\t\n", c.KafkaP50Ms, c.KafkaP99Ms, c.NativeP50Ms, c.NativeP99Ms)
	fmt.Fprintf(tw, "server CPU µs/msg (gateway+nodes | nodes)\t%.1f\t%.1f\t%.2fx\t\n", c.KafkaServerCPUUsPerMsg,
		c.NativeServerCPUUsPerMsg, c.KafkaServerVsNativeNodes)
	fmt.Fprintf(tw, "  gateway / nodes\t%.1f / %.1f\t\t\t\n", c.KafkaGatewayCPUUsPerMsg, c.KafkaNodesCPUUsPerMsg)
	fmt.Fprintf(tw, "gateway+nodes vs native producer+nodes µs/msg\t%.1f\t%.1f\t%.2fx\t\n", c.KafkaServerCPUUsPerMsg,
		c.NativeCPUUsPerMsg, c.KafkaCPURatio)
	fmt.Fprintf(tw, "client CPU µs/msg (kgo | raidq producer, with the workload)\t%.1f\t%.1f\t\t\n", c.KgoClientCPUUsPerMsg,
		c.NativeClientCPUUsPerMsg)
	fmt.Fprintf(tw, "records per batch / stripe\t%.1f\t%.1f\t\t\n", c.KafkaRecordsPerBatch, c.NativeRecordsPerStripe)
	tw.Flush()
	fmt.Fprintf(w, "kafka CPU target (gateway+nodes ≤ %.1fx native producer+nodes): %s at %.2fx\n", KafkaTargetRatio, verdict,
		c.KafkaCPURatio)
}
