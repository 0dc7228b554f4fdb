// Package fanout publishes every partition's decoded records to
// raidq.<cluster>.deliver.<topic>.<partition> (docs/design.md#consumers-groups-and-fencing), so any NATS
// client can subscribe and a partition is decoded once however many
// subscribers there are.
//
// Every node runs a Manager. For each partition whose ensemble holds the
// node, the Manager competes for the KV lease fanout.<topic>.<partition>;
// the holder runs a reader from the position recorded in the lease and
// publishes each record (see Encode for the headers). It renews the lease
// every TTL/3 with the position after the last record the NATS server has
// taken (flushed), and stops publishing at once when a renewal is fenced or
// the lease would expire before it could renew. When the holder dies, the
// lease expires within TTL and another node of the ensemble takes it and
// resumes from the recorded position; it reads sealed data only, so the
// replay is identical and subscribers dedupe on (Raidq-Stripe, Raidq-Index).
//
// This is raidq's only single owner; it sits on the read side, never on the
// write path.
package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// Catalog is a topic catalog that can list its topics (*meta.StaticCatalog
// and *meta.WatchedCatalog are).
type Catalog interface {
	meta.Catalog
	Names() []string
}

// Config configures a node's fan-out manager.
type Config struct {
	NodeID  string
	Cluster string
	// Conn publishes the deliveries (a *nats.Conn, not closed by the
	// manager).
	Conn Publisher
	// Meta holds the leases (a *meta.Store).
	Meta Leases
	// Catalog says which partitions the node is in; polled every TTL/3.
	Catalog Catalog
	// Readers runs the readers (ClientReaders; the client is not closed by
	// the manager).
	Readers Readers
	Logger  *slog.Logger
	// Now is the lease clock; nil = time.Now.
	Now func() time.Time
	// LeaseTTL: a dead holder's partitions move within about this long
	// (default 5s). The holder renews every LeaseTTL/3.
	LeaseTTL time.Duration
	// MaxRate bounds the records per second published per partition
	// (0 = unbounded: only the periodic flush paces the reader).
	MaxRate float64
	// FlushEvery flushes the connection after this many records or
	// FlushBytes bytes of a batch (defaults 1024, 1 MiB), and at the end of
	// every batch, so a reader catching up never races ahead of the server.
	FlushEvery int
	FlushBytes int
	// Interest, when set, says whether anyone subscribes to a deliver
	// subject; while no one does, the lease holder keeps the lease but
	// runs no reader (hold.go). Nil: always publish.
	Interest func(subject string) bool
	// Seed seeds the jobs' jitter (0: random), so a simulation replays.
	Seed uint64
	// Bugs are deliberate mistakes the simulation's TestSimCatchesBugs
	// turns on to show its checks catch them; never set otherwise.
	Bugs Bugs
}

// Bugs lists the deliberate mistakes Config.Bugs may turn on.
type Bugs struct {
	// LapsedByExpiry judges another's lease lapsed by comparing the expiry
	// its holder wrote with this node's clock, instead of core.LeaseWatch
	// (wrong when the clocks differ by more than the margin).
	LapsedByExpiry bool
}

// LeaseName is the KV lease of one partition's fan-out.
func LeaseName(topic string, partition int) string {
	return fmt.Sprintf("fanout.%s.%d", topic, partition)
}

// leaseData is the progress a holder records in its lease.
type leaseData struct {
	Offset uint64 `json:"offset"`
	Index  uint32 `json:"index"`
}

func encodePos(p core.Position) []byte {
	b, _ := json.Marshal(leaseData{Offset: p.Offset, Index: p.Index})
	return b
}

func decodePos(b []byte) (core.Position, error) {
	if len(b) == 0 {
		return core.Position{}, nil
	}
	var d leaseData
	if err := json.Unmarshal(b, &d); err != nil {
		return core.Position{}, err
	}
	return core.Position{Offset: d.Offset, Index: d.Index}, nil
}

type partKey struct {
	topic     string
	partition int
}

// Manager runs one node's fan-out jobs.
type Manager struct {
	cfg     Config
	subj    bus.Subjects
	log     *slog.Logger
	mu      sync.Mutex
	jobs    map[partKey]*job
	quit    chan struct{}
	done    chan struct{}
	stopped bool
}

// Start starts the manager; it returns at once, the leases are sought in
// the background.
func Start(cfg Config) (*Manager, error) {
	if cfg.Conn == nil || cfg.Meta == nil || cfg.Catalog == nil || cfg.Readers == nil {
		return nil, errors.New("fanout: Conn, Meta, Catalog and Readers are required")
	}
	if err := bus.ValidName("node", cfg.NodeID); err != nil {
		return nil, fmt.Errorf("fanout: %w", err)
	}
	subj, err := bus.NewSubjects(cfg.Cluster)
	if err != nil {
		return nil, fmt.Errorf("fanout: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = 1024
	}
	if cfg.FlushBytes <= 0 {
		cfg.FlushBytes = 1 << 20
	}
	m := &Manager{cfg: cfg, subj: subj, log: cfg.Logger.With("component", "fanout", "node", cfg.NodeID),
		jobs: make(map[partKey]*job), quit: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m, nil
}

func (m *Manager) run() {
	defer close(m.done)
	t := time.NewTicker(m.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		m.sync()
		select {
		case <-m.quit:
			return
		case <-t.C:
		}
	}
}

// sync starts a job for every partition the node is in and stops the jobs
// of partitions it left (topic deleted, ensemble changed).
func (m *Manager) sync() {
	want := make(map[partKey]int) // → ensemble position
	for _, name := range m.cfg.Catalog.Names() {
		t, err := m.cfg.Catalog.Topic(name)
		if err != nil {
			continue
		}
		for p := 0; p < t.Partitions; p++ {
			if pos := t.Position(uint32(p), m.cfg.NodeID); pos >= 0 {
				want[partKey{name, p}] = pos
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	for k, j := range m.jobs {
		pos, ok := want[k]
		if !ok {
			delete(m.jobs, k)
			go j.stop(false)
			continue
		}
		j.ensPos.Store(int64(pos))
	}
	for k, pos := range want {
		if _, ok := m.jobs[k]; !ok {
			j := newJob(m, k, pos)
			m.jobs[k] = j
			go j.run()
		}
	}
}

// Stop stops every job; held leases are released (keeping their position)
// so another node takes over at once.
func (m *Manager) Stop() { m.stop(false) }

// Kill stops every job without releasing the leases, as if the node's
// process died (tests and the simulation).
func (m *Manager) Kill() { m.stop(true) }

func (m *Manager) stop(kill bool) {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	close(m.quit)
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	m.jobs = nil
	m.mu.Unlock()
	<-m.done
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() { defer wg.Done(); j.stop(kill) }()
	}
	wg.Wait()
}

// PartitionStatus is one fan-out job's state.
type PartitionStatus struct {
	Topic     string
	Partition int
	Holding   bool          // this node holds the lease (and publishes, unless Idle)
	Idle      bool          // holding, but no one subscribes: no reader runs
	Next      core.Position // next position to publish (while holding)
	Published uint64        // records published by this node since start
	Takeovers uint64        // times this node acquired the lease
}

// Status lists the jobs, sorted by topic and partition.
func (m *Manager) Status() []PartitionStatus {
	m.mu.Lock()
	out := make([]PartitionStatus, 0, len(m.jobs))
	for k, j := range m.jobs {
		s := PartitionStatus{Topic: k.topic, Partition: k.partition, Published: j.published.Load(), Takeovers: j.takeovers.Load()}
		if p := j.cur.Load(); p != nil {
			s.Holding = true
			s.Next = p.flushedPos()
		} else if pos := j.idle.Load(); pos != nil {
			s.Holding, s.Idle = true, true
			s.Next = *pos
		}
		out = append(out, s)
	}
	m.mu.Unlock()
	sort.Slice(out, func(a, b int) bool {
		if out[a].Topic != out[b].Topic {
			return out[a].Topic < out[b].Topic
		}
		return out[a].Partition < out[b].Partition
	})
	return out
}

// job competes for one partition's lease and publishes while it holds it.
type job struct {
	m         *Manager
	k         partKey
	ensPos    atomic.Int64
	lease     string
	subject   string
	log       *slog.Logger
	quit      chan struct{}
	done      chan struct{}
	once      sync.Once
	kill      atomic.Bool
	cur       atomic.Pointer[publisher]
	idle      atomic.Pointer[core.Position] // holding with no subscriber: where publishing would resume
	published atomic.Uint64
	takeovers atomic.Uint64
	rnd       *rand.Rand // the jitter: Config.Seed and the lease's name, or random
}

func newJob(m *Manager, k partKey, ensPos int) *job {
	j := &job{m: m, k: k, lease: LeaseName(k.topic, k.partition),
		subject: m.subj.Deliver(k.topic, uint32(k.partition)),
		log:     m.log.With("topic", k.topic, "partition", k.partition),
		quit:    make(chan struct{}), done: make(chan struct{})}
	seed := m.cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	h := fnv.New64a()
	h.Write([]byte(j.lease))
	j.rnd = rand.New(rand.NewPCG(seed, h.Sum64()))
	j.ensPos.Store(int64(ensPos))
	return j
}

func (j *job) stop(kill bool) {
	j.once.Do(func() {
		j.kill.Store(kill)
		close(j.quit)
	})
	<-j.done
}

// sleep waits d or until the job stops; false if it stopped.
func (j *job) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-j.quit:
		return false
	case <-t.C:
		return true
	}
}

func (j *job) ttl() time.Duration { return j.m.cfg.LeaseTTL }

// jitter spreads d by ±10% (only the job's goroutine calls it).
func (j *job) jitter(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(j.rnd.Int64N(int64(d/5)+1))
}

func (j *job) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), j.ttl())
}

func (j *job) run() {
	defer close(j.done)
	// Another holder's lease is judged lapsed on this node's own clock
	// (core.LeaseWatch), never by comparing its written expiry with it.
	var watch core.LeaseWatch
	epoch := j.m.cfg.Now()
	for {
		select {
		case <-j.quit:
			return
		default:
		}
		ctx, cancel := j.ctx()
		cur, curRev, err := j.m.cfg.Meta.ReadLease(ctx, j.lease)
		cancel()
		mono := j.m.cfg.Now().Sub(epoch).Nanoseconds()
		if err != nil {
			watch.Failed(mono)
			j.log.Debug("reading fan-out lease", "err", err)
		} else if watch.Observe(mono, curRev); curRev == 0 || cur.Holder == j.m.cfg.NodeID || cur.Expires == 0 ||
			j.lapsed(&watch, mono, cur) {
			// Free, expired or ours: the node at ensemble position i waits
			// i steps first, so partitions spread over their ensembles'
			// first nodes and a dead holder's successor is predictable.
			if pos := j.ensPos.Load(); cur.Holder != j.m.cfg.NodeID && pos > 0 && !j.sleep(time.Duration(pos)*j.ttl()/12) {
				return
			}
			ctx, cancel := j.ctx()
			start := j.m.cfg.Now()
			l, rev, err := j.m.cfg.Meta.TakeLease(ctx, j.lease, j.m.cfg.NodeID, j.ttl(), start, curRev, cur.Data)
			cancel()
			switch {
			case errors.Is(err, meta.ErrFenced):
				// another node took it first
			case err != nil:
				j.log.Warn("acquiring fan-out lease", "err", err)
			default:
				l.Holder = cur.Holder // hold logs the previous holder
				j.hold(l, rev, start)
				continue // try again at once: the lease may still be ours
			}
		}
		if !j.sleep(j.jitter(j.ttl() / 3)) {
			return
		}
	}
}

// lapsed judges another's lease lapsed on this node's own clock.
func (j *job) lapsed(w *core.LeaseWatch, mono int64, cur meta.Lease) bool {
	if j.m.cfg.Bugs.LapsedByExpiry {
		return j.m.cfg.Now().UnixNano() >= cur.Expires
	}
	return w.Lapsed(mono, int64(j.ttl()))
}

// margin is how long after a renewal (or acquisition) started the holder
// may keep publishing: a little less than the TTL, for clock skew.
func (j *job) margin() time.Duration { return j.ttl() - j.ttl()/5 }

func (j *job) release(rev uint64, next core.Position) {
	ctx, cancel := j.ctx()
	defer cancel()
	if err := j.m.cfg.Meta.ReleaseLease(ctx, j.lease, j.m.cfg.NodeID, rev, encodePos(next)); err != nil {
		j.log.Debug("releasing fan-out lease", "err", err)
	}
}

// publisher is one holding's sink: it publishes deliveries in order while
// the lease is valid, and records how far the server has taken them.
type publisher struct {
	j        *job
	deadline atomic.Int64 // unix ns after which nothing is published
	halted   atomic.Bool
	lost     chan struct{} // closed when publishing failed or the lease ran out
	lostOnce sync.Once
	whyMu    sync.Mutex
	reason   string
	limiter  *rate.Limiter
	ctx      context.Context
	cancel   context.CancelFunc

	mu      sync.Mutex
	next    core.Position // after the last published record
	flushed core.Position // after the last record the server has taken
}

func newPublisher(j *job, from core.Position, deadline time.Time) *publisher {
	p := &publisher{j: j, lost: make(chan struct{}), next: from, flushed: from}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.deadline.Store(deadline.UnixNano())
	if j.m.cfg.MaxRate > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(j.m.cfg.MaxRate), max(1, int(j.m.cfg.MaxRate/10)))
	}
	return p
}

func (p *publisher) extend(deadline time.Time) { p.deadline.Store(deadline.UnixNano()) }

// halt makes the sink publish nothing more, at once.
func (p *publisher) halt() {
	p.halted.Store(true)
	p.cancel()
}

func (p *publisher) fail(why string) {
	p.lostOnce.Do(func() {
		p.whyMu.Lock()
		p.reason = why
		p.whyMu.Unlock()
		p.halted.Store(true)
		close(p.lost)
	})
}

func (p *publisher) why() string {
	p.whyMu.Lock()
	defer p.whyMu.Unlock()
	return p.reason
}

func (p *publisher) flushedPos() core.Position {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flushed
}

// ok reports whether the sink may still publish.
func (p *publisher) ok() bool {
	if p.halted.Load() {
		return false
	}
	if p.j.m.cfg.Now().UnixNano() >= p.deadline.Load() {
		p.fail("lease not renewed in time")
		return false
	}
	return true
}

// sink is the reader's sink. Once anything fails it publishes nothing
// more; the holding ends and a new one restarts from the recorded position.
func (p *publisher) sink(ds []core.Delivery) {
	cfg := &p.j.m.cfg
	nc := cfg.Conn
	maxPayload := int(nc.MaxPayload())
	n, bytes := 0, 0
	for _, d := range ds {
		if !p.ok() {
			return
		}
		if p.limiter != nil && p.limiter.Wait(p.ctx) != nil {
			return
		}
		msg := Encode(p.j.subject, d)
		if size := len(d.Record.Value) + headerSize(msg.Header); size > maxPayload-256 {
			p.j.log.Warn("record larger than the NATS max payload: published without its value",
				"pos", d.Pos.String(), "value_bytes", len(d.Record.Value), "max_payload", maxPayload)
			msg.Data = nil
			msg.Header.Set(HeaderTooLarge, fmt.Sprint(len(d.Record.Value)))
			for len(msg.Header.Values(HeaderBase64)) > 0 && headerSize(msg.Header) > maxPayload-256 {
				msg.Header.Del(HeaderBase64)
			}
		}
		if err := nc.PublishMsg(msg); err != nil {
			p.fail("publish: " + err.Error())
			return
		}
		p.j.published.Add(1)
		p.mu.Lock()
		p.next = core.Position{Offset: d.Pos.Offset, Index: d.Pos.Index + 1}
		p.mu.Unlock()
		n++
		bytes += len(msg.Data)
		if n >= cfg.FlushEvery || bytes >= cfg.FlushBytes {
			if !p.flush() {
				return
			}
			n, bytes = 0, 0
		}
	}
	p.flush()
}

// flush waits until the server has taken everything published, then
// records the position as safe to hand on.
func (p *publisher) flush() bool {
	p.mu.Lock()
	next := p.next
	p.mu.Unlock()
	if err := p.j.m.cfg.Conn.FlushTimeout(p.j.ttl() / 3); err != nil {
		p.fail("flush: " + err.Error())
		return false
	}
	p.mu.Lock()
	p.flushed = next
	p.mu.Unlock()
	return true
}

func headerSize(h nats.Header) int {
	n := 12
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
