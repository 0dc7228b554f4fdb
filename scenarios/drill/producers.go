package drill

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/drillhooks"
)

// connect connects the producers' clients (and the live reader's) before
// the topic exists, so the load can start right after the topic is
// created: producers that wait for a topic are a real case, and the skew
// drill depends on it (a producer whose clock is behind writes its first
// stripes just before the topic's creation time).
func (r *run) connect(ctx context.Context) error {
	url := r.be.ClientURL(r.plan.stable())
	native := r.plan.producers
	if r.plan.kafka {
		native = 0 // the kgo producer instead (kafka_clients.go)
	}
	for i := range native {
		opts := append(r.clientOpts(fmt.Sprintf("raidq-drill-p%d", i)), raidq.WithMetrics(r.reg))
		if clock := r.plan.clock(i); clock != nil {
			opts = append(opts, drillhooks.Clock(clock).(raidq.Option))
		}
		c, err := raidq.Connect(url, opts...)
		if err != nil {
			return fmt.Errorf("producer %d: %w", i, err)
		}
		r.pclients = append(r.pclients, c)
	}
	c, err := raidq.Connect(url, append(r.clientOpts("raidq-drill-live"), raidq.WithMetrics(r.reg))...)
	if err != nil {
		return fmt.Errorf("live reader: %w", err)
	}
	r.liveClient = c
	return nil
}

// closeClients closes the clients connect made that load did not take.
func (r *run) closeClients() {
	for _, c := range r.pclients {
		c.Close()
	}
	r.pclients = nil
	if r.liveClient != nil {
		r.liveClient.Close()
		r.liveClient = nil
	}
}

// load runs the producers for cfg.Duration while the fault schedule runs,
// then flushes them and waits for the schedule to finish.
func (r *run) load(ctx context.Context) error {
	if r.kafka != nil {
		return r.kafkaLoad(ctx)
	}
	clients := r.pclients
	r.pclients = nil
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	prods, err := r.openProducers(ctx, clients)
	if err != nil {
		return err
	}
	schedDone, err := r.startLoad(ctx)
	if err != nil {
		return err
	}
	r.runProducers(ctx, prods)
	r.event("info", "load ends: flushing the producers")
	r.flushProducers(ctx, prods)
	select {
	case <-schedDone:
	default:
		r.cfg.Logger.Info("drill: waiting for the fault schedule to finish")
		<-schedDone
	}
	return ctx.Err()
}

// openProducers waits until each client sees the drill topic and returns
// one producer per client, each with its own seed.
func (r *run) openProducers(ctx context.Context, clients []*raidq.Client) ([]*raidq.Producer, error) {
	prods := make([]*raidq.Producer, 0, r.plan.producers)
	for i, c := range clients {
		if err := c.WaitTopic(ctx, Topic); err != nil {
			return nil, fmt.Errorf("producer %d: %w", i, err)
		}
		p, err := c.Producer(Topic, drillhooks.Seed(r.cfg.Seed*1000+uint64(i)+1).(raidq.ProducerOption), raidq.WithCloseTimeout(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("producer %d: %w", i, err)
		}
		prods = append(prods, p)
	}
	return prods, nil
}

// startLoad starts the live reader, sets t = 0 (r.start, r.hist), and
// starts the node watcher (ended by r.stopWatch) and the fault schedule;
// the returned channel closes when the schedule is done.
func (r *run) startLoad(ctx context.Context) (<-chan struct{}, error) {
	if err := r.startLive(ctx); err != nil {
		return nil, err
	}
	n := r.plan.producers
	r.start = time.Now()
	r.hist = newHistory(r.start, n)
	r.live.setStart(r.start, r.hist)
	if r.group != nil {
		r.group.setStart(r.start, r.hist)
	}
	if r.kafka != nil {
		r.kafka.group.setStart(r.start, r.hist)
	}
	r.event("info", "load starts: %d producers, %d msgs/s, %d-byte messages, %s", n, r.cfg.Rate, r.cfg.Size, r.cfg.Duration)
	watchStop := make(chan struct{})
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); r.watch(ctx, watchStop) }()
	var once sync.Once
	r.stopWatch = func() { once.Do(func() { close(watchStop); <-watchDone }) }
	schedDone := make(chan struct{})
	go func() { defer close(schedDone); r.schedule(ctx) }()
	return schedDone, nil
}

// runProducers sends at cfg.Rate (shared by the producers) for
// cfg.Duration or until ctx ends, reporting progress; it returns once
// every producer has stopped sending.
func (r *run) runProducers(ctx context.Context, prods []*raidq.Producer) {
	h := r.hist
	r.runSenders(ctx, len(prods), func(pi int, value []byte, seq int, release func()) {
		prods[pi].Produce(context.Background(), raidq.Message{Value: value}, func(m raidq.Message, err error) {
			h.outcome(pi, seq, m, err)
			release()
		})
	})
}

// sendFunc hands send seq of sender pi, value, to a client; release must
// be called once the send's outcome is recorded.
type sendFunc func(pi int, value []byte, seq int, release func())

// runSenders runs n paced senders (produce) through send, at cfg.Rate in
// total, for cfg.Duration or until ctx ends, reporting progress; it
// returns once every sender has stopped.
func (r *run) runSenders(ctx context.Context, n int, send sendFunc) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	pad := make([]byte, r.cfg.Size)
	for i := range pad {
		pad[i] = 'a' + byte(i%26)
	}
	interval := time.Duration(float64(time.Second) * float64(n) / float64(r.cfg.Rate))
	for pi := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produce(pi, n, send, interval, pad, stop)
		}()
	}
	tick := time.NewTicker(200 * time.Millisecond)
	end := time.NewTimer(r.cfg.Duration)
loop:
	for {
		select {
		case <-tick.C:
			a, f, pe := r.hist.counts()
			r.progress(Progress{Phase: "load", Elapsed: time.Since(r.start), Acked: a, Failed: f, Pending: pe})
		case <-end.C:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	tick.Stop()
	close(stop)
	wg.Wait()
}

// flushProducers flushes every producer (concurrently, up to 20s),
// freezes the history, then closes the producers and reports the final
// counts.
func (r *run) flushProducers(ctx context.Context, prods []*raidq.Producer) {
	var fw sync.WaitGroup
	for _, p := range prods {
		fw.Add(1)
		go func() {
			defer fw.Done()
			fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			_ = p.Flush(fctx)
		}()
	}
	fw.Wait()
	r.hist.freeze()
	for _, p := range prods {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = p.Flush(cctx)
		cancel()
		_ = p.Close() // bounded by WithCloseTimeout(2s), given at creation
	}
	a, f, _ := r.hist.counts()
	r.progress(Progress{Phase: "load", Elapsed: r.cfg.Duration, Acked: a, Failed: f})
}

// produce runs sender pi (of n): it sends at a steady pace (one message
// per interval) with at most cfg.Window in flight, until stop closes. A
// sender that fell more than a second behind (its window was full) skips
// ahead instead of bursting.
func (r *run) produce(pi, n int, send sendFunc, interval time.Duration, pad []byte, stop <-chan struct{}) {
	h := r.hist
	sem := make(chan struct{}, r.cfg.Window)
	release := func() { <-sem }
	next := r.start.Add(interval * time.Duration(pi) / time.Duration(max(1, n)))
	timer := time.NewTimer(0)
	<-timer.C
	for {
		if d := time.Until(next); d > 0 {
			timer.Reset(d)
			select {
			case <-stop:
				return
			case <-timer.C:
			}
		}
		select {
		case <-stop:
			return
		case sem <- struct{}{}:
		}
		now := time.Now()
		seq := h.attempt(pi, now)
		send(pi, value(pi, seq, now, r.cfg.Size, pad), seq, release)
		next = next.Add(interval)
		if behind := time.Since(next); behind > time.Second {
			next = time.Now()
		}
	}
}

// schedule runs the plan's steps at their times.
func (r *run) schedule(ctx context.Context) {
	for _, s := range r.plan.steps {
		if d := time.Until(r.start.Add(s.at)); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if err := s.do(ctx); err != nil {
			r.event("error", "%s: %v", s.name, err)
		}
	}
}

// watch reports nodes that exit while the drill did not stop them; a
// scenario may handle such an exit (the corrupt drill wipes and restarts a
// node whose store failed).
func (r *run) watch(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, x := range r.be.PollExits() {
			id := r.be.IDs()[x.node]
			if r.plan.onExit != nil && r.plan.onExit(ctx, x) {
				continue
			}
			r.event("error", "%s exited by itself (exit code %d): %s", id, x.code, lastLine(x.tail))
			r.mu.Lock()
			r.exits = append(r.exits, fmt.Sprintf("%s: exit code %d: %s", id, x.code, lastLine(x.tail)))
			r.mu.Unlock()
		}
	}
}
