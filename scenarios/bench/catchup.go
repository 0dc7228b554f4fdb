package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq"
)

// Catch-up (Config.CatchUp): a backlog of Messages is filled first,
// untimed (the publishing workload, async: Publishers × Window sends
// outstanding), then one reader reads all of it from the earliest
// position, timed from its creation to its last message, with the CPU of
// this process and of every server process over that time (/proc).
//
//	raidq      catchup_*              a raidq.Consumer from the earliest position
//	JetStream  js_catchup_ordered_*   an ordered consumer (no acks; pull-based, its fastest reader)
//	           js_catchup_pull_*      a durable pull consumer, explicit ack of every
//	                                  message (timed until the server has every ack)
//
// Per reader: msgs_s, mb_s, seconds, cpu_us_per_msg (servers + client),
// server_cpu_us_per_msg, client_cpu_us_per_msg, delivered, lost
// (backlog not read before a 30 s stall), duplicates. Per fill
// (catchup_, js_catchup_): backlog, fill_msgs_s, fill_failed. Ratios:
// catchup_ratio (raidq msgs/s / JetStream ordered), catchup_pull_ratio
// (/ pull), catchup_cpu_ratio (raidq CPU per message / JetStream ordered).

// runCatchUp runs the catch-up mode on each system cfg asks for.
func runCatchUp(ctx context.Context, cfg *Config, dir string, r *Report) error {
	err := r.runSides(cfg, dir,
		func(d string) (string, error) { return catchUpRaidq(ctx, cfg, d, r.Read) },
		func(d string) (string, error) { return catchUpJetStream(ctx, cfg, d, r.Read) })
	if err != nil {
		return err
	}
	putRatio(r.Read, "catchup_ratio", "catchup_msgs_s", "js_catchup_ordered_msgs_s")
	putRatio(r.Read, "catchup_pull_ratio", "catchup_msgs_s", "js_catchup_pull_msgs_s")
	putRatio(r.Read, "catchup_cpu_ratio", "catchup_cpu_us_per_msg", "js_catchup_ordered_cpu_us_per_msg")
	return nil
}

// fillBacklog publishes the backlog through t (untimed) and adds the
// fill's figures under prefix; it returns how many messages were acked.
func fillBacklog(ctx context.Context, cfg *Config, system string, t target, fig map[string]float64, prefix string) int {
	cfg.logf("%s catch-up: filling a backlog of %d messages of %d B", system, cfg.Messages, cfg.Size)
	w := workload{messages: cfg.Messages, size: cfg.Size, publishers: cfg.Publishers, async: true, window: cfg.Window}
	start := time.Now()
	rec := w.run(ctx, t, nil)
	acked := len(rec.acks)
	fig[prefix+"backlog"] = float64(acked)
	fig[prefix+"fill_failed"] = float64(rec.failed)
	if d := time.Since(start).Seconds(); d > 0 {
		fig[prefix+"fill_msgs_s"] = round3(float64(acked) / d)
	}
	if rec.failed > 0 {
		cfg.logf("%s catch-up: %d backlog sends failed, first: %s", system, rec.failed, rec.firstErr)
	}
	return acked
}

// putCatchUp adds one timed read's figures under prefix.
func putCatchUp(fig map[string]float64, prefix string, s *deliverySink, elapsed time.Duration, server, client float64, size int) {
	s.put(fig, prefix, nil)
	n := s.count()
	fig[prefix+"seconds"] = round3(elapsed.Seconds())
	if sec := elapsed.Seconds(); sec > 0 {
		fig[prefix+"msgs_s"] = round3(float64(n) / sec)
		fig[prefix+"mb_s"] = round3(float64(n) * float64(size) / sec / 1e6)
	}
	fig[prefix+"cpu_us_per_msg"] = perMsgUs(server+client, n)
	fig[prefix+"server_cpu_us_per_msg"] = perMsgUs(server, n)
	fig[prefix+"client_cpu_us_per_msg"] = perMsgUs(client, n)
}

// readTime is how long a timed read took: from start to its last
// message (or to end, if later: the pull consumer's acks).
func readTime(start, last, end time.Time) time.Duration {
	if last.Before(start) {
		last = start
	}
	if end.After(last) {
		last = end
	}
	return last.Sub(start)
}

// catchUpRaidq fills and reads the backlog on six raidq nodes.
func catchUpRaidq(ctx context.Context, cfg *Config, dir string, fig map[string]float64) (string, error) {
	e, p, setup, err := startReadEnv(ctx, cfg, dir)
	if err != nil {
		return "", err
	}
	defer e.close()
	acked := fillBacklog(ctx, cfg, "raidq", raidqTarget{p: p}, fig, "catchup_")
	_ = p.Close()
	// Let the whole backlog fall behind the read frontier, so the read
	// waits for no clock.
	params, _ := raidq.ProfileParams(cfg.Latency)
	sleepUntil(ctx, time.Now().Add(max(cfg.Settle, params.ReadDelay+params.AcceptWindow+params.MaxSkew)))
	sink := newSink(false, 0, cfg.Messages)
	sink.setExpect(acked)
	cfg.logf("raidq catch-up: reading %d messages from the earliest position", acked)
	m := startCPU(e.tracked())
	start := time.Now()
	c, err := e.cl.Consumer("bench", raidq.WithStart(time.Unix(0, 1)))
	if err != nil {
		return "", err
	}
	go drainConsumer(c, sink)
	sink.waitDone(ctx, time.Time{}, stallTimeout)
	server, client := m.stop()
	_ = c.Close()
	putCatchUp(fig, "catchup_", sink, readTime(start, sink.lastAt(), time.Time{}), server, client, cfg.Size)
	return fmt.Sprintf("catch-up raidq: %s; %s; one raidq.Consumer from the earliest position (catchup_*), CPU of the six nodes and this process",
		setup, paramsText(cfg)), ctx.Err()
}

// catchUpJetStream fills the stream and reads it twice: an ordered
// consumer, then a pull consumer with explicit acks.
func catchUpJetStream(ctx context.Context, cfg *Config, dir string, fig map[string]float64) (string, error) {
	res := &Result{}
	e, err := startJetStream(ctx, cfg, dir, res)
	if err != nil {
		return "", err
	}
	defer e.kill()
	t, closePub, err := connectJSPublishers(cfg, jsURLs(e.servers, -1))
	if err != nil {
		closePub()
		return "", err
	}
	acked := fillBacklog(ctx, cfg, "jetstream", t, fig, "js_catchup_")
	closePub()
	var cs conns
	defer cs.close()
	nc, err := cs.connect(strings.Join(jsURLs(e.servers, -1), ","), "jsbench-reader")
	if err != nil {
		return "", err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	stream, err := js.Stream(ctx, jsStream)
	if err != nil {
		return "", err
	}
	if err := jsCatchUpOrdered(ctx, cfg, e, stream, acked, fig); err != nil {
		return "", fmt.Errorf("ordered consumer: %w", err)
	}
	if err := jsCatchUpPull(ctx, cfg, e, nc, stream, acked, fig); err != nil {
		return "", fmt.Errorf("pull consumer: %w", err)
	}
	return fmt.Sprintf("catch-up JetStream: %s; an ordered consumer, deliver all, no acks (js_catchup_ordered_*), then a durable pull "+
		"consumer, explicit acks (js_catchup_pull_*); CPU of the three servers and this process", res.Setup), ctx.Err()
}

// jsCatchUpOrdered times an ordered consumer reading the whole stream.
func jsCatchUpOrdered(ctx context.Context, cfg *Config, e *jsEnv, stream jetstream.Stream, acked int, fig map[string]float64) error {
	sink := newSink(false, 0, cfg.Messages)
	sink.setExpect(acked)
	cfg.logf("jetstream catch-up: ordered consumer reading %d messages", acked)
	m := startCPU(e.tracked())
	start := time.Now()
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	cc, err := oc.Consume(func(msg jetstream.Msg) { sink.observe(msg.Data(), time.Now()) })
	if err != nil {
		return err
	}
	sink.waitDone(ctx, time.Time{}, stallTimeout)
	server, client := m.stop()
	cc.Stop()
	putCatchUp(fig, "js_catchup_ordered_", sink, readTime(start, sink.lastAt(), time.Time{}), server, client, cfg.Size)
	return nil
}

// jsCatchUpPull times a durable pull consumer reading the whole stream
// and acknowledging every message, until the server holds every ack.
func jsCatchUpPull(ctx context.Context, cfg *Config, e *jsEnv, nc *nats.Conn, stream jetstream.Stream, acked int, fig map[string]float64) error {
	sink := newSink(false, 0, cfg.Messages)
	sink.setExpect(acked)
	cfg.logf("jetstream catch-up: pull consumer (explicit acks) reading %d messages", acked)
	m := startCPU(e.tracked())
	start := time.Now()
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "catchup-pull",
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		_ = msg.Ack()
		sink.observe(msg.Data(), time.Now())
	})
	if err != nil {
		return err
	}
	sink.waitDone(ctx, time.Time{}, stallTimeout)
	end, err := waitAcked(ctx, nc, cons)
	server, client := m.stop()
	cc.Stop()
	putCatchUp(fig, "js_catchup_pull_", sink, readTime(start, sink.lastAt(), end), server, client, cfg.Size)
	return err
}

// waitAcked flushes nc (the acks are published without waiting) and
// asks the consumer until no ack is pending; it returns when that was
// seen. It gives up after 30 s.
func waitAcked(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer) (time.Time, error) {
	if err := nc.Flush(); err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := cons.Info(ictx)
		cancel()
		if err == nil && info.NumAckPending == 0 {
			return time.Now(), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Now(), errors.Join(errors.New("acks still pending after 30s"), err, ctx.Err())
		}
		sleepUntil(ctx, time.Now().Add(5*time.Millisecond))
	}
}

// catchUpReaders are the catch-up table's rows: label and figure prefix.
var catchUpReaders = [][2]string{
	{"raidq.Consumer", "catchup_"},
	{"JetStream ordered (no acks)", "js_catchup_ordered_"},
	{"JetStream pull (explicit acks)", "js_catchup_pull_"},
}

// printCatchUp writes the catch-up table (nothing if the mode did not run).
func (r *Report) printCatchUp(w io.Writer) {
	f := r.Read
	_, rq := f["catchup_backlog"]
	_, js := f["js_catchup_backlog"]
	if !rq && !js {
		return
	}
	fmt.Fprintln(w, "catch-up: one reader, the whole backlog from the earliest position")
	for _, b := range [][2]string{{"raidq", "catchup_"}, {"JetStream", "js_catchup_"}} {
		if n, ok := f[b[1]+"backlog"]; ok {
			fmt.Fprintf(w, "  %s backlog: %.0f messages, filled (untimed) at %.0f msgs/s, %.0f sends failed\n", b[0], n, f[b[1]+"fill_msgs_s"],
				f[b[1]+"fill_failed"])
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "reader\tmsgs/s\tMB/s\tseconds\tCPU µs/msg\tservers / client\tdelivered\tlost\t")
	for _, rd := range catchUpReaders {
		p := rd[1]
		if _, ok := f[p+"delivered"]; ok {
			fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.2f\t%.1f\t%.1f / %.1f\t%.0f\t%.0f\t\n", rd[0], f[p+"msgs_s"], f[p+"mb_s"], f[p+"seconds"],
				f[p+"cpu_us_per_msg"], f[p+"server_cpu_us_per_msg"], f[p+"client_cpu_us_per_msg"], f[p+"delivered"], f[p+"lost"])
		}
	}
	tw.Flush()
	if v, ok := f["catchup_ratio"]; ok {
		fmt.Fprintf(w, "catchup_ratio (raidq / JetStream ordered msgs/s): %.2fx; vs pull: %.2fx; CPU per message vs ordered: %.2fx\n",
			v, f["catchup_pull_ratio"], f["catchup_cpu_ratio"])
	}
}
