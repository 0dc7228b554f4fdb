package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
)

// End to end (Config.E2E): one producer sends Messages, synchronously one
// at a time (Rate 0) or at Rate per second, each stamped with its send
// time; two readers, live at once in this process, record send→delivery
// latency (HdrHistogram) and which messages arrived within E2ETimeout
// after the last send.
//
//	raidq      e2e_*       a raidq.Consumer from latest
//	           e2e_sub_*   a core NATS subscriber of the deliver subject
//	                       (the nodes' fan-out: decoded once per partition)
//	JetStream  js_e2e_*     an ordered push consumer (deliver new)
//	           js_e2e_sub_* a core NATS subscriber of the stream's subject
//	                        (it gets a message when it is published, before
//	                        it is stored: not a durable read)
//
// Per reader: p50_ms, p99_ms, p999_ms, max_ms, delivered, lost (acked,
// never delivered), duplicates. Per producer (e2e_ and js_e2e_): sent,
// acked, send_failed, send_msgs_s. raidq's producer also reports, from
// the client's metrics (WithMetrics), e2e_stripes, e2e_stripe_retries,
// e2e_stripe_rewrites and e2e_retried_pct (retries at a fresh offset per
// stripe, in %). Ratios (raidq /
// JetStream): e2e_p50_ratio, e2e_p99_ratio (Consumer vs ordered consumer),
// e2e_sub_p99_ratio (subscriber vs subscriber).

// The raidq client's counters of stripe attempts and of retries at a
// fresh offset (actors/metrics).
const (
	attemptsMetric = "raidq_producer_stripe_attempts_total"
	retriesMetric  = "raidq_producer_stripe_retries_total"
	rewritesMetric = "raidq_producer_rewrites_total"
)

// stripeCounts are the client's stripe counters at one moment.
type stripeCounts struct{ attempts, retries, rewrites float64 }

func (e *raidqEnv) stripeCounts() stripeCounts {
	return stripeCounts{e.metric(attemptsMetric), e.metric(retriesMetric), e.metric(rewritesMetric)}
}

// put adds the stripes written since c0 under prefix: stripes (first
// attempts), stripe_retries (attempts at a fresh offset),
// stripe_rewrites (committed stripes written again after a conflict)
// and retried_pct = 100 × retries / stripes.
func (c stripeCounts) put(fig map[string]float64, prefix string, c0 stripeCounts) {
	retries, rewrites := c.retries-c0.retries, c.rewrites-c0.rewrites
	stripes := c.attempts - c0.attempts - retries - rewrites
	if stripes <= 0 {
		return
	}
	fig[prefix+"stripes"], fig[prefix+"stripe_retries"], fig[prefix+"stripe_rewrites"] = stripes, retries, rewrites
	fig[prefix+"retried_pct"] = round3(100 * retries / stripes)
}

// runE2E runs the end-to-end mode on each system cfg asks for.
func runE2E(ctx context.Context, cfg *Config, dir string, r *Report) error {
	err := r.runSides(cfg, dir,
		func(d string) (string, error) { return e2eRaidq(ctx, cfg, d, r.Read) },
		func(d string) (string, error) { return e2eJetStream(ctx, cfg, d, r.Read) })
	if err != nil {
		return err
	}
	putRatio(r.Read, "e2e_p50_ratio", "e2e_p50_ms", "js_e2e_p50_ms")
	putRatio(r.Read, "e2e_p99_ratio", "e2e_p99_ms", "js_e2e_p99_ms")
	putRatio(r.Read, "e2e_sub_p99_ratio", "e2e_sub_p99_ms", "js_e2e_sub_p99_ms")
	return nil
}

// producerText describes how the e2e producer sends.
func producerText(cfg *Config) string {
	if cfg.Rate > 0 {
		return fmt.Sprintf("one producer at %g msgs/s (acks not awaited)", cfg.Rate)
	}
	return "one producer, synchronous sends one at a time"
}

// e2eRaidq measures end to end on six raidq nodes, adding its figures
// to fig; it returns what it measured.
func e2eRaidq(ctx context.Context, cfg *Config, dir string, fig map[string]float64) (string, error) {
	e, p, setup, err := startReadEnv(ctx, cfg, dir)
	if err != nil {
		return "", err
	}
	defer e.close()
	defer p.Close()
	cons, sub := newSink(true, 0, cfg.Messages), newSink(true, 0, cfg.Messages)
	c, err := e.cl.Consumer("bench")
	if err != nil {
		return "", err
	}
	defer c.Close()
	go drainConsumer(c, cons)
	var cs conns
	defer cs.close()
	subject, err := deliverSubject(e.c.Cluster())
	if err != nil {
		return "", err
	}
	nc, err := cs.connect(e.c.Node(0).ClientURL(), "raidq-bench-deliver")
	if err != nil {
		return "", err
	}
	if err := subscribeSink(nc, subject, sub); err != nil {
		return "", err
	}
	cfg.logf("raidq e2e: waiting for the readers to go live")
	t := raidqTarget{p: p}
	if err := warmReaders(ctx, t, cfg.Size, []*deliverySink{cons, sub}); err != nil {
		return "", err
	}
	c0 := e.stripeCounts()
	st := sendAndWait(ctx, cfg, "raidq", t, []*deliverySink{cons, sub})
	e.stripeCounts().put(fig, "e2e_", c0)
	st.put(fig, "e2e_")
	cons.put(fig, "e2e_", st)
	sub.put(fig, "e2e_sub_", st)
	return fmt.Sprintf("e2e raidq: %s; %s; %s; readers: a raidq.Consumer from latest (e2e_*) and a core NATS subscriber of %s on n0 (e2e_sub_*)",
		setup, paramsText(cfg), producerText(cfg), subject), ctx.Err()
}

// e2eJetStream measures end to end on three nats-servers, adding its
// figures to fig; it returns what it measured.
func e2eJetStream(ctx context.Context, cfg *Config, dir string, fig map[string]float64) (string, error) {
	res := &Result{}
	e, err := startJetStream(ctx, cfg, dir, res)
	if err != nil {
		return "", err
	}
	defer e.kill()
	one := *cfg
	one.Publishers = 1
	urls := strings.Join(jsURLs(e.servers, -1), ",")
	t, closePub, err := connectJSPublishers(&one, jsURLs(e.servers, -1))
	defer closePub()
	if err != nil {
		return "", err
	}
	ord, sub := newSink(true, 0, cfg.Messages), newSink(true, 0, cfg.Messages)
	var cs conns
	defer cs.close()
	if err := subscribeOrdered(&cs, urls, "jsbench-ordered", ord); err != nil {
		return "", err
	}
	nc, err := cs.connect(urls, "jsbench-core-sub")
	if err != nil {
		return "", err
	}
	if err := subscribeSink(nc, jsSubject, sub); err != nil {
		return "", err
	}
	if err := warmReaders(ctx, t, cfg.Size, []*deliverySink{ord, sub}); err != nil {
		return "", err
	}
	st := sendAndWait(ctx, cfg, "jetstream", t, []*deliverySink{ord, sub})
	st.put(fig, "js_e2e_")
	ord.put(fig, "js_e2e_", st)
	sub.put(fig, "js_e2e_sub_", st)
	return fmt.Sprintf("e2e JetStream: %s; %s; readers: an ordered push consumer, deliver new (js_e2e_*), and a core NATS subscriber of %s (js_e2e_sub_*)",
		res.Setup, producerText(cfg), jsSubject), ctx.Err()
}

// subscribeOrdered connects to urls and starts an ordered push consumer
// of the stream (deliver new, no acks) whose messages s observes.
func subscribeOrdered(cs *conns, urls, name string, s *deliverySink) error {
	nc, err := cs.connect(urls, name)
	if err != nil {
		return err
	}
	js, err := nc.JetStream()
	if err != nil {
		return err
	}
	sub, err := js.Subscribe(jsSubject, func(m *nats.Msg) { s.observe(m.Data, time.Now()) }, nats.OrderedConsumer(), nats.DeliverNew())
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	return nc.Flush()
}

// sendAndWait sends Messages through t as cfg.Rate says, then waits up to
// E2ETimeout for every acked message at every sink.
func sendAndWait(ctx context.Context, cfg *Config, system string, t target, sinks []*deliverySink) *sendStats {
	cfg.logf("%s: sending %d messages (%s)", system, cfg.Messages, producerText(cfg))
	st := sendPaced(ctx, t, cfg.Size, 0, cfg.Messages, cfg.Rate, 1)
	for _, s := range sinks {
		s.setExpect(st.nAcked)
	}
	waitAll(ctx, sinks, time.Now().Add(cfg.E2ETimeout))
	if st.failed > 0 {
		cfg.logf("%s: %d sends failed, first: %s", system, st.failed, st.firstErr)
	}
	return st
}

// e2eReaders are the e2e table's rows: label and figure prefix.
var e2eReaders = [][2]string{
	{"raidq.Consumer", "e2e_"},
	{"raidq deliver subject (NATS sub)", "e2e_sub_"},
	{"JetStream ordered push consumer", "js_e2e_"},
	{"JetStream core NATS sub", "js_e2e_sub_"},
}

// printE2E writes the end-to-end table (nothing if the mode did not run).
func (r *Report) printE2E(w io.Writer) {
	f := r.Read
	_, rq := f["e2e_sent"]
	_, js := f["js_e2e_sent"]
	if !rq && !js {
		return
	}
	fmt.Fprintln(w, "end to end: send → delivery")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "reader\tp50 ms\tp99 ms\tp99.9 ms\tmax ms\tdelivered\tlost\tduplicates\t")
	for _, rd := range e2eReaders {
		p := rd[1]
		if _, ok := f[p+"delivered"]; ok {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t\n", rd[0], f[p+"p50_ms"], f[p+"p99_ms"], f[p+"p999_ms"],
				f[p+"max_ms"], f[p+"delivered"], f[p+"lost"], f[p+"duplicates"])
		}
	}
	tw.Flush()
	for _, s := range [][2]string{{"raidq", "e2e_"}, {"JetStream", "js_e2e_"}} {
		if _, ok := f[s[1]+"sent"]; ok {
			fmt.Fprintf(w, "%s producer: %.0f sent, %.0f acked, %.0f failed, %.0f msgs/s", s[0], f[s[1]+"sent"], f[s[1]+"acked"],
				f[s[1]+"send_failed"], f[s[1]+"send_msgs_s"])
			if n, ok := f[s[1]+"stripes"]; ok {
				fmt.Fprintf(w, "; stripes retried at a fresh offset: %.0f of %.0f (%.2f%%)", f[s[1]+"stripe_retries"], n, f[s[1]+"retried_pct"])
			}
			fmt.Fprintln(w)
		}
	}
	if v, ok := f["e2e_p99_ratio"]; ok {
		fmt.Fprintf(w, "p99 raidq.Consumer / JetStream ordered consumer: %.2fx; deliver subject / core sub: %.2fx\n", v, f["e2e_sub_p99_ratio"])
	}
}
