// Package demo is `raidq demo`: an in-process six-node cluster that
// produces, kills nodes half-way, consumes everything back and reports what
// was acknowledged, delivered and lost.
package demo

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/drillhooks"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/stripe/quorum"
)

// Config are the demo's knobs (the flags of `raidq demo`).
type Config struct {
	Nodes      int
	Messages   int
	Producers  int
	Partitions int
	Size       int
	Kill       int           // nodes SIGKILL-like stopped half-way
	Slow       int           // nodes that answer SlowDelay late
	SlowDelay  time.Duration // default 50ms
	Seed       uint64
	Window     int // outstanding sends per producer
	NoSync     bool
	Dir        string // data directory; empty = a temporary one, removed after
	Logger     *slog.Logger
	Progress   func(acked, failed, total int)
}

// Report is the demo's result (the JSON of `raidq demo --json`).
type Report struct {
	Messages            int      `json:"messages"`
	Acked               int      `json:"acked"`
	Failed              int      `json:"failed"`
	Delivered           int      `json:"delivered"`
	Lost                int      `json:"lost"`
	Duplicates          int      `json:"duplicates"`
	Unexpected          int      `json:"unexpected"`
	Recovered           int      `json:"recovered"`
	InDoubt             int      `json:"in_doubt"`
	Killed              []string `json:"killed"`
	Restarted           []string `json:"restarted,omitempty"`
	Slow                []string `json:"slow"`
	AckP50Ms            float64  `json:"ack_p50_ms"`
	AckP99Ms            float64  `json:"ack_p99_ms"`
	AckMaxMs            float64  `json:"ack_max_ms"`
	LongestAckGapMs     float64  `json:"longest_ack_gap_ms"`
	ThroughputMsgsS     float64  `json:"throughput_msgs_s"`
	DiskBytesPerPayload float64  `json:"disk_bytes_per_payload_byte"`
	FirstError          string   `json:"first_error,omitempty"`
	ProduceSeconds      float64  `json:"produce_s"`
	ConsumeSeconds      float64  `json:"consume_s"`
	OK                  bool     `json:"ok"`
}

func (c *Config) defaults() error {
	if c.Nodes == 0 {
		c.Nodes = 6
	}
	if c.Producers <= 0 {
		c.Producers = 4
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.SlowDelay <= 0 {
		c.SlowDelay = 50 * time.Millisecond
	}
	if c.Window <= 0 {
		c.Window = 64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c.Validate()
}

// Validate refuses a configuration the demo cannot run (the CLI calls it
// before starting anything, for exit code 2).
func (c Config) Validate() error {
	switch {
	case c.Nodes < 6:
		return fmt.Errorf("--nodes %d: the demo topic needs 6 nodes (4 data + 2 parity)", c.Nodes)
	case c.Messages < 1:
		return fmt.Errorf("--messages %d: must be at least 1", c.Messages)
	case c.Size < 16 || c.Size > 1<<20:
		return fmt.Errorf("--size %d: must be 16..1048576 bytes", c.Size)
	case c.Kill < 0 || c.Slow < 0 || c.Kill+c.Slow > c.Nodes:
		return fmt.Errorf("--kill %d and --slow %d: must be >= 0 and together at most --nodes %d", c.Kill, c.Slow, c.Nodes)
	}
	return nil
}

// Run runs the demo.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "raidq-demo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	slow := make([]int, cfg.Slow)
	for i := range slow {
		slow[i] = i // the first nodes are slow, the last ones are killed
	}
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: dir, Nodes: cfg.Nodes, NoSync: cfg.NoSync,
		Logger: cfg.Logger, SlowNodes: slow, SlowDelay: cfg.SlowDelay})
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	if err := lc.CreateTopic("demo", cfg.Partitions, quorum.Default()); err != nil {
		return nil, err
	}
	c, err := lc.Connect()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := &Report{Messages: cfg.Messages}
	for _, i := range slow {
		r.Slow = append(r.Slow, lc.NodeIDs()[i])
	}
	start := time.Now()
	h, err := produce(ctx, cfg, lc, c, r)
	if err != nil {
		return nil, err
	}
	r.ProduceSeconds = time.Since(start).Seconds()
	if err := restartIfUnreadable(lc, cfg, r); err != nil {
		return nil, err
	}
	cstart := time.Now()
	if err := consume(ctx, c, start, h, r); err != nil {
		return nil, err
	}
	r.ConsumeSeconds = time.Since(cstart).Seconds()
	if payload := int64(r.Acked) * int64(cfg.Size); payload > 0 {
		r.DiskBytesPerPayload = float64(lc.DiskBytes()) / float64(payload)
	}
	r.OK = r.Lost == 0 && r.Unexpected == 0
	return r, nil
}

// restartIfUnreadable brings killed nodes back when more are down than the
// code tolerates (n-k): their shards are on disk, and without them stripes
// written before the kill cannot be decoded. With --kill <= n-k the demo
// consumes with the nodes still dead.
func restartIfUnreadable(lc *server.LocalCluster, cfg Config, r *Report) error {
	p := raidq.DefaultParams()
	if cfg.Kill <= p.N-p.K {
		return nil
	}
	ids := lc.NodeIDs()
	for i := 0; i < cfg.Kill; i++ {
		idx := len(ids) - 1 - i
		if err := lc.RestartNode(idx); err != nil {
			return fmt.Errorf("restart %s: %w", ids[idx], err)
		}
		r.Restarted = append(r.Restarted, ids[idx])
	}
	return nil
}

// history records every send's outcome.
type history struct {
	mu      sync.Mutex
	acked   map[string]bool
	failed  map[string]bool
	ackAt   []time.Time
	lat     *hdrhistogram.Histogram
	inDoubt int
}

func produce(ctx context.Context, cfg Config, lc *server.LocalCluster, c *raidq.Client, r *Report) (*history, error) {
	h := &history{acked: make(map[string]bool), failed: make(map[string]bool),
		lat: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)}
	per := (cfg.Messages + cfg.Producers - 1) / cfg.Producers
	var wg sync.WaitGroup
	var done sync.WaitGroup
	sent := newHalfway(cfg.Messages)
	errs := make(chan error, cfg.Producers)
	for pi := 0; pi < cfg.Producers; pi++ {
		n := min(per, cfg.Messages-pi*per)
		if n <= 0 {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runProducer(ctx, cfg, c, pi, n, h, sent, &done, r); err != nil {
				errs <- err
			}
		}()
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		defer close(sent.resume) // producers wait at the mark until the kill is done
		<-sent.reached
		ids := lc.NodeIDs()
		for i := 0; i < cfg.Kill; i++ {
			idx := len(ids) - 1 - i
			_ = lc.KillNode(idx)
			h.mu.Lock()
			r.Killed = append(r.Killed, ids[idx])
			h.mu.Unlock()
		}
	}()
	wg.Wait()
	<-killed
	done.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	summarize(h, r)
	return h, nil
}

// runProducer sends n messages with at most cfg.Window outstanding.
func runProducer(ctx context.Context, cfg Config, c *raidq.Client, pi, n int, h *history,
	sent *halfway, done *sync.WaitGroup, r *Report) error {
	p, err := c.Producer("demo", drillhooks.Seed(cfg.Seed+uint64(pi)+1).(raidq.ProducerOption))
	if err != nil {
		return err
	}
	defer p.Close()
	sem := make(chan struct{}, cfg.Window)
	pad := make([]byte, cfg.Size)
	for i := range pad {
		pad[i] = 'a' + byte(i%26)
	}
	for j := 0; j < n; j++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		id := fmt.Sprintf("p%d-%d|", pi, j)
		v := append([]byte(id), pad[len(id):]...)
		t0 := time.Now()
		done.Add(1)
		p.Produce(context.Background(), raidq.Message{Value: v}, func(_ raidq.Message, err error) {
			defer done.Done()
			defer func() { <-sem }()
			h.record(id, t0, err, r)
			if cfg.Progress != nil {
				h.mu.Lock()
				a, f := len(h.acked), len(h.failed)
				h.mu.Unlock()
				cfg.Progress(a, f, cfg.Messages)
			}
		})
		sent.add()
		if err := sent.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// halfway closes reached once half of the messages were handed to producers
// (the kill point); producers past it wait for resume (closed once the
// kill is done), so on a busy machine the second half is really sent
// after the kill, not before the kill goroutine got to run.
type halfway struct {
	n       atomic.Int64
	mark    int64
	reached chan struct{}
	resume  chan struct{}
}

func newHalfway(total int) *halfway {
	h := &halfway{mark: int64(total / 2), reached: make(chan struct{}), resume: make(chan struct{})}
	if h.mark == 0 {
		close(h.reached)
	}
	return h
}

// wait blocks a producer that is past the mark until the kill is done.
func (h *halfway) wait(ctx context.Context) error {
	if h.n.Load() < h.mark {
		return nil
	}
	select {
	case <-h.resume:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *halfway) add() {
	if h.n.Add(1) == h.mark {
		close(h.reached)
	}
}

func (h *history) record(id string, t0 time.Time, err error, r *Report) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.failed[id] = true
		if r.FirstError == "" {
			r.FirstError = err.Error()
		}
		return
	}
	h.acked[id] = true
	h.ackAt = append(h.ackAt, now)
	_ = h.lat.RecordValue(now.Sub(t0).Microseconds())
}

func summarize(h *history, r *Report) {
	r.Acked, r.Failed = len(h.acked), len(h.failed)
	r.AckP50Ms = float64(h.lat.ValueAtQuantile(50)) / 1000
	r.AckP99Ms = float64(h.lat.ValueAtQuantile(99)) / 1000
	r.AckMaxMs = float64(h.lat.Max()) / 1000
	sort.Slice(h.ackAt, func(i, j int) bool { return h.ackAt[i].Before(h.ackAt[j]) })
	var gap time.Duration
	for i := 1; i < len(h.ackAt); i++ {
		gap = max(gap, h.ackAt[i].Sub(h.ackAt[i-1]))
	}
	r.LongestAckGapMs = float64(gap.Microseconds()) / 1000
	if n := len(h.ackAt); n > 1 {
		r.ThroughputMsgsS = float64(n) / h.ackAt[n-1].Sub(h.ackAt[0]).Seconds()
	}
}

// consume reads everything back from start and checks it against the history.
func consume(ctx context.Context, c *raidq.Client, start time.Time, h *history, r *Report) error {
	cons, err := c.Consumer("demo", raidq.WithStart(start.Add(-time.Second)), raidq.WithReports(func(r raidq.ReadReport) { h.mu.Lock(); h.inDoubt += len(r.InDoubt); h.mu.Unlock() }))
	if err != nil {
		return err
	}
	defer cons.Close()
	got := make(map[string]int)
	// Read until every acked message arrived and the readers have passed
	// the end of the run by the look-ahead (so late copies show up too),
	// or give up after a bound and report what is missing.
	end := time.Now().Add(3 * time.Second)
	hard := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case m := <-cons.Messages():
			got[msgID(m.Value)]++
			continue
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if (time.Now().After(end) && deliveredAll(h, got)) || time.Now().After(hard) {
			break
		}
	}
	check(h, got, r)
	return nil
}

func deliveredAll(h *history, got map[string]int) bool {
	for id := range h.acked {
		if got[id] == 0 {
			return false
		}
	}
	return true
}

func check(h *history, got map[string]int, r *Report) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.InDoubt = h.inDoubt
	for id, n := range got {
		switch {
		case h.acked[id]:
			r.Delivered++
		case h.failed[id]:
			r.Delivered++
			r.Recovered++ // failed (timed out) but committed after all
		default:
			r.Unexpected++
		}
		if n > 1 {
			r.Duplicates += n - 1
		}
	}
	for id := range h.acked {
		if got[id] == 0 {
			r.Lost++
		}
	}
}

func msgID(v []byte) string {
	for i, b := range v {
		if b == '|' {
			return string(v[:i+1])
		}
	}
	return string(v)
}
