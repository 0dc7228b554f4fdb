package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Fan-out (Config.FanOut): one producer sends Messages into the bench
// topic (one partition by default) at Rate (DefaultFanOutRate when 0)
// while count readers of one kind, in this process, each receive every
// message; the CPU of the servers and of this process is measured from
// the first send to the last delivery (/proc). Each count runs with
// fresh readers, after a warm-up that makes every one of them live.
//
//	raidq      fanout_*             count core NATS subscribers of the deliver
//	                                subject (each its own connection, spread
//	                                over the six nodes): the partition is
//	                                decoded once by the fan-out, whatever the
//	                                count, but the nodes' embedded NATS servers
//	                                still send count copies
//	           fanout_consumer_*    count raidq.Consumers (each runs its own
//	                                partition readers, so node CPU grows)
//	JetStream  js_fanout_*          count core NATS subscribers of the stream subject
//	           js_fanout_consumer_* count ordered push consumers (deliver new)
//
// A count of 0 runs the producer alone (fanout_*_0, js_fanout_*_0): the
// write path's share. Per count N: node_cpu_us_per_msg_N (raidq: the six
// nodes; JetStream: server_cpu_us_per_msg_N, the three servers) and
// client_cpu_us_per_msg_N per produced message, client_cpu_us_per_delivery_N
// per message delivered to a reader (this process runs the producer too),
// lost_N (acked, not delivered to some reader within E2ETimeout), p99_ms_N
// (send→delivery over all readers). Ratios against the count 1 (when 1 is
// among the counts): cpu_ratio_N = server CPU per message with N / with 1,
// e.g. fanout_cpu_ratio_16, fanout_consumer_cpu_ratio_16.

// preWarmBase is the first index of the fan-out's untimed warm-up
// messages: above every phase's range, without warmBit, so a reader that
// sees one ignores it.
const preWarmBase = uint64(1) << 62

// FanOutRow is one fan-out phase.
type FanOutRow struct {
	System string `json:"system"`
	// Readers is the readers' kind: subscribers (core NATS), consumers
	// (raidq.Consumer; JetStream ordered push consumers) or none.
	Readers   string  `json:"readers"`
	Count     int     `json:"count"`
	Produced  int     `json:"produced"`
	Delivered int     `json:"delivered"`
	Lost      int     `json:"lost"`
	Seconds   float64 `json:"seconds"`
	// ServerCPUUsPerMsg is the servers' CPU (raidq: the six nodes) per
	// produced message; the client's is per produced message and per
	// message delivered to a reader.
	ServerCPUUsPerMsg      float64 `json:"server_cpu_us_per_msg"`
	ClientCPUUsPerMsg      float64 `json:"client_cpu_us_per_msg"`
	ClientCPUUsPerDelivery float64 `json:"client_cpu_us_per_delivery,omitempty"`
	P50Ms                  float64 `json:"p50_ms,omitempty"`
	P99Ms                  float64 `json:"p99_ms,omitempty"`
}

// openReaders starts one reader per sink (whose deliveries it observes)
// and returns a func that stops them all.
type openReaders func(sinks []*deliverySink) (stop func(), err error)

// fanOutKinds are the reader kinds of one system, by Readers name.
type fanOutKinds map[string]openReaders

// runFanOut runs the fan-out mode on each system cfg asks for.
func runFanOut(ctx context.Context, cfg *Config, dir string, r *Report) error {
	err := r.runSides(cfg, dir,
		func(d string) (string, error) { return fanOutRaidq(ctx, cfg, d, r) },
		func(d string) (string, error) { return fanOutJetStream(ctx, cfg, d, r) })
	if err != nil {
		return err
	}
	fanOutFigures(r.Read, r.FanOut)
	return nil
}

// fanOutPhases runs, for every count of cfg.FanOut, a phase per reader
// kind (a count of 0: one phase without readers), appending their rows
// to r.FanOut. Every phase sends fresh messages (its own index range).
func fanOutPhases(ctx context.Context, cfg *Config, system string, t target, procs func() []*tracked, kinds fanOutKinds, r *Report) error {
	// Untimed first: Warmup messages at the phases' pace, then Settle, so
	// the first phase does not pay for what fresh servers do at first.
	cfg.logf("%s fan-out: warm-up, %d messages, then %v", system, cfg.Warmup, cfg.Settle)
	if st := sendPaced(ctx, t, cfg.Size, preWarmBase, cfg.Warmup, cfg.fanOutRate(), cfg.fanOutBurst()); st.failed > 0 {
		return fmt.Errorf("warm-up: %d of %d sends failed, first: %s", st.failed, cfg.Warmup, st.firstErr)
	}
	sleepUntil(ctx, time.Now().Add(cfg.Settle))
	var base uint64
	for _, n := range cfg.FanOut {
		names := []string{"subscribers", "consumers"}
		if n == 0 {
			names = []string{"none"}
		}
		for _, kind := range names {
			cfg.logf("%s fan-out: %d %s, %d messages at %g msgs/s", system, n, kind, cfg.Messages, cfg.fanOutRate())
			row, err := fanOutPhase(ctx, cfg, t, procs(), base, n, kinds[kind])
			if err != nil {
				return fmt.Errorf("%d %s: %w", n, kind, err)
			}
			row.System, row.Readers = system, kind
			r.FanOut = append(r.FanOut, row)
			base += uint64(cfg.Messages)
		}
	}
	return nil
}

// fanOutPhase opens n readers (open nil: none), warms them up, and
// measures one paced send of Messages.
func fanOutPhase(ctx context.Context, cfg *Config, t target, procs []*tracked, base uint64, n int, open openReaders) (FanOutRow, error) {
	sinks := make([]*deliverySink, n)
	for i := range sinks {
		sinks[i] = newSink(true, base, cfg.Messages)
	}
	if open != nil && n > 0 {
		stop, err := open(sinks)
		if err != nil {
			return FanOutRow{}, err
		}
		defer stop()
	}
	if err := warmReaders(ctx, t, cfg.Size, sinks); err != nil {
		return FanOutRow{}, err
	}
	m := startCPU(procs)
	start := time.Now()
	st := sendPaced(ctx, t, cfg.Size, base, cfg.Messages, cfg.fanOutRate(), cfg.fanOutBurst())
	for _, s := range sinks {
		s.setExpect(st.nAcked)
	}
	waitAll(ctx, sinks, time.Now().Add(cfg.E2ETimeout))
	server, client := m.stop()
	row := FanOutRow{Count: n, Produced: st.nAcked, Seconds: round3(time.Since(start).Seconds()),
		ServerCPUUsPerMsg: perMsgUs(server, st.nAcked), ClientCPUUsPerMsg: perMsgUs(client, st.nAcked)}
	hist := hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
	for _, s := range sinks {
		d, lost := s.merge(hist, st)
		row.Delivered += d
		row.Lost += lost
	}
	row.ClientCPUUsPerDelivery = perMsgUs(client, row.Delivered)
	if row.Delivered > 0 {
		row.P50Ms, row.P99Ms = float64(hist.ValueAtQuantile(50))/1000, float64(hist.ValueAtQuantile(99))/1000
	}
	if st.failed > 0 {
		cfg.logf("fan-out: %d sends failed, first: %s", st.failed, st.firstErr)
	}
	return row, ctx.Err()
}

// fanOutRaidq runs the fan-out phases on six raidq nodes.
func fanOutRaidq(ctx context.Context, cfg *Config, dir string, r *Report) (string, error) {
	e, p, setup, err := startReadEnv(ctx, cfg, dir)
	if err != nil {
		return "", err
	}
	defer e.close()
	defer p.Close()
	subject, err := deliverSubject(e.c.Cluster())
	if err != nil {
		return "", err
	}
	kinds := fanOutKinds{
		"subscribers": func(sinks []*deliverySink) (func(), error) {
			var cs conns
			for i, s := range sinks {
				nc, err := cs.connect(e.c.Node(i%len(e.c.Nodes())).ClientURL(), fmt.Sprintf("raidq-bench-sub-%d", i))
				if err == nil {
					err = subscribeSink(nc, subject, s)
				}
				if err != nil {
					cs.close()
					return nil, err
				}
			}
			return cs.close, nil
		},
		"consumers": func(sinks []*deliverySink) (func(), error) { return openConsumers(e, sinks) },
	}
	if err := fanOutPhases(ctx, cfg, "raidq", raidqTarget{p: p}, e.tracked, kinds, r); err != nil {
		return "", err
	}
	return fmt.Sprintf("fan-out raidq: %s; %s; one producer at %g msgs/s; subscribers: core NATS subscribers of %s, one connection each, "+
		"spread over the six nodes (fanout_*); consumers: raidq.Consumers from latest on one client (fanout_consumer_*); node CPU = the six nodes",
		setup, paramsText(cfg), cfg.fanOutRate(), subject), nil
}

// openConsumers starts one raidq.Consumer (from latest) per sink.
func openConsumers(e *raidqEnv, sinks []*deliverySink) (func(), error) {
	var stops []func()
	stop := func() {
		for _, f := range stops {
			f()
		}
	}
	for _, s := range sinks {
		c, err := e.cl.Consumer("bench")
		if err != nil {
			stop()
			return nil, err
		}
		go drainConsumer(c, s)
		stops = append(stops, func() { _ = c.Close() })
	}
	return stop, nil
}

// fanOutJetStream runs the fan-out phases on three nats-servers.
func fanOutJetStream(ctx context.Context, cfg *Config, dir string, r *Report) (string, error) {
	res := &Result{}
	e, err := startJetStream(ctx, cfg, dir, res)
	if err != nil {
		return "", err
	}
	defer e.kill()
	one := *cfg
	one.Publishers = 1
	t, closePub, err := connectJSPublishers(&one, jsURLs(e.servers, -1))
	defer closePub()
	if err != nil {
		return "", err
	}
	open := func(sub func(cs *conns, url, name string, s *deliverySink) error) openReaders {
		return func(sinks []*deliverySink) (func(), error) {
			var cs conns
			for i, s := range sinks {
				if err := sub(&cs, e.servers[i%len(e.servers)].url(), fmt.Sprintf("jsbench-reader-%d", i), s); err != nil {
					cs.close()
					return nil, err
				}
			}
			return cs.close, nil
		}
	}
	kinds := fanOutKinds{
		"subscribers": open(func(cs *conns, url, name string, s *deliverySink) error {
			nc, err := cs.connect(url, name)
			if err != nil {
				return err
			}
			return subscribeSink(nc, jsSubject, s)
		}),
		"consumers": open(subscribeOrdered),
	}
	if err := fanOutPhases(ctx, cfg, "jetstream", t, e.tracked, kinds, r); err != nil {
		return "", err
	}
	return fmt.Sprintf("fan-out JetStream: %s; one producer at %g msgs/s (PublishAsync); subscribers: core NATS subscribers of %s "+
		"(js_fanout_*); consumers: ordered push consumers, deliver new (js_fanout_consumer_*); each its own connection, spread over the "+
		"three servers", res.Setup, cfg.fanOutRate(), jsSubject), nil
}

// fanOutPrefix is the figure prefix of a row's system and reader kind,
// and the word for its servers.
func fanOutPrefix(row FanOutRow) (prefix, servers string) {
	prefix, servers = "fanout_", "node"
	if row.System == "jetstream" {
		prefix, servers = "js_fanout_", "server"
	}
	if row.Readers == "consumers" {
		prefix += "consumer_"
	}
	return prefix, servers
}

// fanOutFigures adds every row's figures, and the CPU ratios against the
// count 1, to fig. With a count of 0 among them it also adds each row's
// read share: server CPU per message above the producer-alone phase of
// its system (read_<servers>_cpu_us_per_msg_N; no ratio of these: a
// difference of two noisy figures can be near zero).
func fanOutFigures(fig map[string]float64, rows []FanOutRow) {
	one := make(map[string]float64)  // prefix → server CPU per message with one reader
	zero := make(map[string]float64) // system → server CPU per message without readers
	for _, row := range rows {
		prefix, servers := fanOutPrefix(row)
		n := strconv.Itoa(row.Count)
		fig[prefix+servers+"_cpu_us_per_msg_"+n] = row.ServerCPUUsPerMsg
		fig[prefix+"client_cpu_us_per_msg_"+n] = row.ClientCPUUsPerMsg
		fig[prefix+"lost_"+n] = float64(row.Lost)
		switch row.Count {
		case 0:
			zero[row.System] = row.ServerCPUUsPerMsg
			continue
		case 1:
			one[prefix] = row.ServerCPUUsPerMsg
		}
		fig[prefix+"client_cpu_us_per_delivery_"+n] = row.ClientCPUUsPerDelivery
		fig[prefix+"p99_ms_"+n] = row.P99Ms
	}
	for _, row := range rows {
		prefix, servers := fanOutPrefix(row)
		n := strconv.Itoa(row.Count)
		base, hasOne := one[prefix]
		if row.Count > 1 && hasOne && base > 0 {
			fig[prefix+"cpu_ratio_"+n] = round3(row.ServerCPUUsPerMsg / base)
		}
		z, hasZero := zero[row.System]
		if row.Count == 0 || !hasZero {
			continue
		}
		fig[prefix+"read_"+servers+"_cpu_us_per_msg_"+n] = round3(row.ServerCPUUsPerMsg - z)
	}
}

// fanOutLabels are the fan-out table's reader descriptions.
var fanOutLabels = map[string]string{
	"raidq/subscribers":     "deliver-subject subs",
	"raidq/consumers":       "raidq.Consumers",
	"jetstream/subscribers": "core NATS subs",
	"jetstream/consumers":   "ordered push consumers",
}

// printFanOut writes the fan-out table (nothing if the mode did not run).
func (r *Report) printFanOut(w io.Writer) {
	if len(r.FanOut) == 0 {
		return
	}
	fmt.Fprintln(w, "fan-out: one producer, N readers of every message")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\treaders\tN\tproduced\tdelivered\tlost\tserver CPU µs/msg\tvs N=1\tabove N=0\tclient µs/msg\tclient µs/delivery\tp99 ms\t")
	for _, row := range r.FanOut {
		prefix, servers := fanOutPrefix(row)
		n := strconv.Itoa(row.Count)
		label := cmp.Or(fanOutLabels[row.System+"/"+row.Readers], row.Readers)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%s\t%s\t%.1f\t%.1f\t%.2f\t\n", row.System, label, row.Count, row.Produced,
			row.Delivered, row.Lost, row.ServerCPUUsPerMsg, r.figText(prefix+"cpu_ratio_"+n, "%.2fx"),
			r.figText(prefix+"read_"+servers+"_cpu_us_per_msg_"+n, "%.1f"), row.ClientCPUUsPerMsg, row.ClientCPUUsPerDelivery, row.P99Ms)
	}
	tw.Flush()
	fmt.Fprintln(w, "server CPU: raidq's six nodes (the fan-out decodes a partition once; their NATS servers send N copies), "+
		"JetStream's three servers; per produced message, the write path included (above N=0: without it)")
}

// figText formats r.Read[name] with format, "-" when it is absent.
func (r *Report) figText(name, format string) string {
	if v, ok := r.Read[name]; ok {
		return fmt.Sprintf(format, v)
	}
	return "-"
}
