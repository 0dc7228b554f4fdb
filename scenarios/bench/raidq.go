package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/scenarios/cluster"
)

// raidqTarget publishes through one raidq producer shared by every
// publisher (a Producer is safe for concurrent use and batches what its
// callers send at the same time).
type raidqTarget struct{ p *raidq.Producer }

func (t raidqTarget) send(ctx context.Context, _ int, msg []byte) error {
	_, err := t.p.Send(ctx, raidq.Message{Value: msg})
	return err
}

func (t raidqTarget) sendAsync(_ int, msg []byte, done func(error)) {
	t.p.Produce(context.Background(), raidq.Message{Value: msg}, func(_ raidq.Message, err error) { done(err) })
}

// runRaidq runs the workload against six `raidq node` processes.
func runRaidq(ctx context.Context, cfg *Config, dir string) (*Result, error) {
	const nodes = 6
	res := &Result{System: "raidq", Messages: cfg.Messages}
	c, err := newRaidqCluster(cfg, dir, nodes, res)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cfg.logf("raidq: starting %d node processes", nodes)
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("raidq: start the nodes: %w", err)
	}
	// Clients connect to servers that stay up: a kill measures the loss of
	// storage nodes, not a client reconnect.
	killed, urls := raidqKills(cfg, c)
	for i := range cfg.Slow {
		res.Slow = append(res.Slow, c.Node(i).ID)
	}
	reg := prometheus.NewRegistry()
	cl, err := connectRaidq(cfg, c, urls, reg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := benchProducer(tctx, cfg, cl)
	if err != nil {
		return nil, err
	}
	var closeOnce sync.Once
	closeProducer := func() {
		closeOnce.Do(func() {
			_ = p.Close() // waits up to 10s for pending outcomes
		})
	}
	defer closeProducer()
	t := raidqTarget{p: p}
	warm, err := warmUp(tctx, cfg, t)
	if err != nil {
		return nil, fmt.Errorf("raidq: warm-up: %w", err)
	}

	procs := make([]*tracked, nodes)
	for i, n := range c.Nodes() {
		procs[i] = &tracked{name: n.ID, pid: n.Proc.Cmd.Process.Pid}
	}
	attempts := func() float64 {
		v, _, _ := metrics.Sum(reg, "raidq_producer_stripe_attempts_total", nil)
		return v
	}
	attempts0 := attempts()
	rec, use, err := measure(ctx, cfg, "raidq", procs, t, func(rec *recorder) {
		killRaidqNodes(cfg, c, procs, killed, rec, res)
	})
	if err != nil {
		return nil, err
	}
	res.summarize(rec, cfg.Size)
	res.addProcs(procs, use.client, use.machine)
	if res.Stripes = int(attempts() - attempts0); res.Stripes > 0 {
		res.RecordsPerStripe = float64(res.Acked) / float64(res.Stripes)
	}

	// Stop gracefully (profiles are written on exit), then measure disk.
	closeProducer()
	cl.Close()
	disk := stopRaidqNodes(cfg, c, killed)
	res.setDisk(disk, int64(res.Acked+warm)*int64(cfg.Size))
	return res, nil
}

// newRaidqCluster describes the cluster in res.Setup and returns it,
// not started yet: nodes `raidq node` processes (fsync as cfg.Fsync says,
// the first cfg.Slow with a reply delay).
func newRaidqCluster(cfg *Config, dir string, nodes int, res *Result) (*cluster.Cluster, error) {
	fsync := "fsync on"
	var args []string
	if !cfg.Fsync {
		args = append(args, "--no-fsync")
		fsync = "--no-fsync"
	}
	res.Setup = fmt.Sprintf("%d `raidq node` processes, 4+2 Reed-Solomon, W=4, %d partition(s), %s", nodes, cfg.Partitions, fsync)
	if !cfg.Direct {
		res.Setup += ", client through one server (--direct=false)"
	}
	env := cfg.serverEnv()
	bin := cfg.Binary
	if cfg.NodeBinary != "" {
		bin = cfg.NodeBinary
		res.Setup += ", nodes run " + bin
	}
	return cluster.New(cluster.Config{Binary: bin, Dir: filepath.Join(dir, "raidq"), Nodes: nodes,
		Cluster: "bench", LogLevel: "warn", Args: args, Env: env,
		NodeArgs: func(i int) []string {
			if i < cfg.Slow {
				return []string{"--reply-delay", cfg.SlowDelay.String()}
			}
			return nil
		}})
}

// raidqKills returns the indices of the nodes --kill SIGKILLs (the
// last cfg.Kill) and the client URLs of the other nodes.
func raidqKills(cfg *Config, c *cluster.Cluster) (killed []int, urls []string) {
	nodes := len(c.Nodes())
	killed = make([]int, 0, cfg.Kill)
	for i := range cfg.Kill {
		killed = append(killed, nodes-1-i)
	}
	for i, n := range c.Nodes() {
		if !contains(killed, i) {
			urls = append(urls, n.ClientURL())
		}
	}
	return killed, urls
}

// benchProducer creates the "bench" topic, waits until it is ready and
// returns a producer for it.
func benchProducer(ctx context.Context, cfg *Config, cl *raidq.Client) (*raidq.Producer, error) {
	if err := createTopic(ctx, cfg, cl); err != nil {
		return nil, err
	}
	return cl.Producer("bench", cfg.ProducerOptions...)
}

// createTopic creates the "bench" topic (cfg.Partitions, the parameters
// of the cfg.Latency profile) and waits until it is ready.
func createTopic(ctx context.Context, cfg *Config, cl *raidq.Client) error {
	params, err := raidq.ProfileParams(cfg.Latency)
	if err != nil {
		return err
	}
	if _, err := cl.CreateTopic(ctx, raidq.TopicConfig{Name: "bench", Partitions: cfg.Partitions, Params: params}); err != nil {
		return err
	}
	return cl.WaitTopic(ctx, "bench")
}

// connectRaidq connects the bench's client to urls of cluster c, with its
// metrics in reg.
func connectRaidq(cfg *Config, c *cluster.Cluster, urls []string, reg *prometheus.Registry) (*raidq.Client, error) {
	return raidq.Connect(strings.Join(urls, ","), raidq.WithCluster(c.Cluster()), raidq.WithLogger(cfg.Logger),
		raidq.WithName("raidq-bench"), raidq.WithMetrics(reg), raidq.WithDirectNodes(cfg.Direct))
}

// raidqEnv is six started `raidq node` processes, a client connected to
// all of them (its metrics in reg) and the "bench" topic, created.
type raidqEnv struct {
	c   *cluster.Cluster
	cl  *raidq.Client
	reg *prometheus.Registry
	// graceful: close stops the nodes with SIGTERM (they write their
	// CPU profiles on exit) instead of killing them.
	graceful bool
}

// startRaidqEnv starts the nodes (described in res.Setup), connects and
// creates the topic. On error everything started is stopped; otherwise
// the caller calls close.
func startRaidqEnv(ctx context.Context, cfg *Config, dir string, res *Result) (*raidqEnv, error) {
	c, err := newRaidqCluster(cfg, dir, 6, res)
	if err != nil {
		return nil, err
	}
	e := &raidqEnv{c: c, reg: prometheus.NewRegistry(), graceful: cfg.ProfileDir != ""}
	cfg.logf("raidq: starting 6 node processes")
	if err := c.Start(); err != nil {
		e.close()
		return nil, fmt.Errorf("raidq: start the nodes: %w", err)
	}
	if e.cl, err = connectRaidq(cfg, c, c.URLs(), e.reg); err != nil {
		e.close()
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := createTopic(tctx, cfg, e.cl); err != nil {
		e.close()
		return nil, fmt.Errorf("raidq: create the topic: %w", err)
	}
	return e, nil
}

// close closes the client and stops the nodes: SIGKILL (the read modes
// measure no disk), or SIGTERM when graceful.
func (e *raidqEnv) close() {
	if e.cl != nil {
		_ = e.cl.Close()
	}
	if e.graceful {
		for i := range e.c.Nodes() {
			_, _ = e.c.StopNode(i, 30*time.Second)
		}
	}
	e.c.Close()
}

// tracked returns a fresh tracker per node process.
func (e *raidqEnv) tracked() []*tracked {
	procs := make([]*tracked, 0, len(e.c.Nodes()))
	for _, n := range e.c.Nodes() {
		procs = append(procs, &tracked{name: n.ID, pid: n.Proc.Cmd.Process.Pid})
	}
	return procs
}

// producer returns a producer of the bench topic with the configured options.
func (e *raidqEnv) producer(cfg *Config) (*raidq.Producer, error) {
	return e.cl.Producer("bench", cfg.ProducerOptions...)
}

// startReadEnv starts the six nodes of a read mode and its producer, and
// returns the nodes' setup line; on an error nothing is left running. The
// caller closes both.
func startReadEnv(ctx context.Context, cfg *Config, dir string) (*raidqEnv, *raidq.Producer, string, error) {
	res := &Result{}
	e, err := startRaidqEnv(ctx, cfg, dir, res)
	if err != nil {
		return nil, nil, "", err
	}
	p, err := e.producer(cfg)
	if err != nil {
		e.close()
		return nil, nil, "", err
	}
	return e, p, res.Setup, nil
}

// metric is the sum of a counter of the client's registry (0 if absent).
func (e *raidqEnv) metric(name string) float64 {
	v, _, _ := metrics.Sum(e.reg, name, nil)
	return v
}

// killRaidqNodes SIGKILLs the nodes in killed in the middle of the
// measured run and records the kill in res.
func killRaidqNodes(cfg *Config, c *cluster.Cluster, procs []*tracked, killed []int, rec *recorder, res *Result) {
	at := time.Since(rec.start)
	for _, i := range killed {
		procs[i].finish()
		procs[i].killed = true
		c.KillNode(i)
		res.Killed = append(res.Killed, c.Node(i).ID)
	}
	res.KillAtMs = msOf(at)
	cfg.logf("raidq: killed %s (SIGKILL) at %.0f ms", strings.Join(res.Killed, " "), res.KillAtMs)
}

// stopRaidqNodes stops the nodes not in killed (so they write their
// profiles and exit cleanly) and returns the disk space every node's
// data directory uses.
func stopRaidqNodes(cfg *Config, c *cluster.Cluster, killed []int) int64 {
	for i := range c.Nodes() {
		if !contains(killed, i) {
			if _, err := c.StopNode(i, 30*time.Second); err != nil {
				cfg.logf("raidq: stop %s: %v", c.Node(i).ID, err)
			}
		}
	}
	var disk int64
	for _, n := range c.Nodes() {
		disk += diskUsage(n.Dir)
	}
	return disk
}

// warmUp sends messages until the system acknowledges one (topic and
// stream metadata reach every server), then a short burst that opens
// every connection and route. It returns how many messages it stored.
func warmUp(ctx context.Context, cfg *Config, t target) (int, error) {
	msg := make([]byte, cfg.Size)
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := t.send(actx, 0, msg)
		cancel()
		if err == nil {
			break
		}
		last = err
		select {
		case <-ctx.Done():
			return 0, errors.Join(ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
	w := workload{messages: cfg.Warmup, size: cfg.Size, publishers: cfg.Publishers, async: cfg.Async, window: cfg.Window}
	rec := w.run(ctx, t, nil)
	if rec.failed > 0 {
		return 0, fmt.Errorf("%d warm-up messages failed: %s", rec.failed, rec.firstErr)
	}
	time.Sleep(cfg.Settle)
	return 1 + len(rec.acks), nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
