package node

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"golang.org/x/time/rate"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/internal/actorsys"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// A node's maintenance (docs/design.md#slot-store, docs/design.md#repair-and-scrub): three supervised loop actors,
// children of the node actor, each running one pass at a time on a
// goroutine of its own (the actor only schedules, so it never blocks):
//
//   - repair (repair_pass.go): rebuilds this node's missing or corrupt
//     shards from k others, fills a young incarnation's past and keeps the
//     repaired mark, re-appends in-doubt stripes that proved decodable
//     (reappend.go);
//   - scrub (scrub.go): re-reads this node's shards and hands bad ones to
//     repair;
//   - retention (retention.go): drops whole old ranges by time and size.
//
// The decisions are pure, in actors/core (PlanRange, RebuildShard,
// RepairSpans, Owner.RepairWrite); repair writes reach the slot owner as
// internal messages, never over NATS (repair_write.go).

// RepairConfig tunes a node's repair, scrub and retention loops. The zero
// value means the defaults.
type RepairConfig struct {
	// Disabled turns every maintenance loop off.
	Disabled bool
	// Interval is the time between repair passes (default 10s).
	Interval time.Duration
	// Window is the recent past every pass re-verifies (default 10m).
	Window time.Duration
	// CatchUp bounds how far back a restarted node resumes verifying from
	// where it stopped (its verified mark) when that is older than Window
	// (default 6h).
	CatchUp time.Duration
	// Margin is added to the topic's read delay D: repair only looks at
	// offsets older than now - D - Margin (default 1s).
	Margin time.Duration
	// RateMBps caps repair's network and write bytes (header scans, shard
	// fetches, rebuilt shards) in MB/s, so it never starves the write path
	// (default 20).
	RateMBps float64
	// Concurrency bounds the shards being rebuilt at once (default 8).
	Concurrency int
	// RequestTimeout bounds one scan page or shard fetch (default 2s; at
	// most the link timeout of the client the node reaches its peers
	// with: Config.Client's, or 5s for the node's own, reappend.go).
	RequestTimeout time.Duration
	// InDoubtKeep is how long an in-doubt report is retried before it is
	// given up (default 1h).
	InDoubtKeep time.Duration
	// MaxTargets bounds the queued scrub findings and in-doubt reports
	// (default 10000).
	MaxTargets int
	// Bugs are deliberate mistakes for the simulation's tests (RepairBugs);
	// never set otherwise.
	Bugs RepairBugs
	// ScrubInterval is the time between scrub passes (default 1h; < 0: no scrub).
	ScrubInterval time.Duration
	// ScrubRateMBps caps the scrub's reads (default 10).
	ScrubRateMBps float64
	// RetentionInterval is the time between retention passes (default 30s; < 0: none).
	RetentionInterval time.Duration
}

func (c RepairConfig) withDefaults() RepairConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Interval, 10*time.Second)
	def(&c.Window, 10*time.Minute)
	def(&c.CatchUp, 6*time.Hour)
	def(&c.Margin, time.Second)
	def(&c.RequestTimeout, 2*time.Second)
	def(&c.InDoubtKeep, time.Hour)
	def(&c.ScrubInterval, time.Hour)
	def(&c.RetentionInterval, 30*time.Second)
	if c.RateMBps <= 0 {
		c.RateMBps = 20
	}
	if c.ScrubRateMBps <= 0 {
		c.ScrubRateMBps = 10
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.MaxTargets <= 0 {
		c.MaxTargets = 10000
	}
	return c
}

// byteLimiter is a rate limiter in bytes per second. Its burst is a tenth
// of a second's worth (at least 64 KiB), so repair's traffic stays smooth
// (a range prefetch of many MB must not go out at once next to the write
// path); a larger wait is taken in burst-sized steps.
type byteLimiter struct{ l *rate.Limiter }

func newByteLimiter(mbps float64) byteLimiter {
	bps := mbps * 1e6
	return byteLimiter{rate.NewLimiter(rate.Limit(bps), max(int(bps/10), 64<<10))}
}

func (b byteLimiter) wait(ctx context.Context, n int) error {
	n = max(n, 1)
	for n > 0 {
		step := min(n, b.l.Burst())
		if err := b.l.WaitN(ctx, step); err != nil {
			return err
		}
		n -= step
	}
	return nil
}

// maintenance is a node's repair, scrub and retention state. Repair and
// scrub reach the node only through io (RepairPorts: nodePorts in a node,
// simulated ports in the simulation's RepairLoop).
type maintenance struct {
	// n is the node, for the loop actors (spawnMaintenance) and retention
	// (retention.go) only; nil in a RepairLoop.
	n        *Node
	io       RepairPorts
	id       string // io.ID()
	subjects bus.Subjects
	stats    *Stats
	cfg      RepairConfig
	log      *slog.Logger
	rate     byteLimiter // repair bytes
	scrub    byteLimiter // scrub reads

	mu      sync.Mutex
	parts   map[partKey]*partRepair
	targets map[targetKey]*target
	warned  bool // the catalog cannot list topics
	// reappended: in-doubt stripes this node re-appended, and when.
	reappended map[stripe.ID]time.Time

	repairPID atomic.Pointer[actor.PID] // for kicks (in-doubt reports, scrub findings)
	kicks     chan struct{}             // a RepairLoop's kicks instead (nil in a node)
	belowN    atomic.Int64              // stripes below n seen by the pass under way
	undone    atomic.Int64              // ranges the pass under way could not finish
	// Targets are also looked at between ranges of a long walk (a young
	// node refilling hours of data must not hold up an in-doubt stripe
	// a reader is waiting for): when one was added, or every Interval.
	targetsAdded atomic.Bool
	targetsRun   time.Time // repair goroutine only
}

// partKey names a (topic, partition) on this node.
type partKey struct {
	topic     string
	partition uint32
}

// partRepair is one partition's repair state on this node.
type partRepair struct {
	mu       sync.Mutex
	loaded   bool
	repaired uint64   // MarkRepaired
	verified uint64   // MarkVerified
	dropped  uint64   // MarkDropped
	holes    []uint64 // sorted; replaced, never modified in place (owners share it)
	lastCut  uint64   // retention: the last cut applied by this process
	// Ranges done this process's life (repair goroutine only): gap ranges
	// resolved, window ranges verified.
	gapDone, winDone core.Intervals
}

// target is a single offset repair must look at: a corrupt shard found by
// scrub, or a reader's in-doubt report.
type targetKey struct {
	topic     string
	partition uint32
	offset    uint64
}

type target struct {
	corrupt  bool
	inDoubt  bool
	id       stripe.ID
	first    time.Time
	handoffs int // in-doubt reports handed to the lowest live node so far
}

// handoffPasses is how many passes a node that is not the lowest live one
// hands an in-doubt report over before forgetting it: the lowest node may
// be restarting (not yet subscribed) when the first hand-over is sent, and
// nothing else would bring the report back. The lowest node re-appends a
// stripe once (recentlyReappended).
const handoffPasses = 3

// handedOff counts one more hand-over of k's report and returns the count.
func (m *maintenance) handedOff(k targetKey) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	tg := m.targets[k]
	if tg == nil {
		return handoffPasses
	}
	tg.handoffs++
	return tg.handoffs
}

func newMaintenance(n *Node) *maintenance {
	m := newMaintenanceOn(nodePorts{n}, n.subjects, n.cfg.Repair, n.cfg.Logger, &n.stats)
	m.n = n
	return m
}

// newMaintenanceOn is a node's maintenance over ports.
func newMaintenanceOn(io RepairPorts, subj bus.Subjects, rc RepairConfig, log *slog.Logger, stats *Stats) *maintenance {
	cfg := rc.withDefaults()
	return &maintenance{io: io, id: io.ID(), subjects: subj, stats: stats, cfg: cfg, log: log, rate: newByteLimiter(cfg.RateMBps),
		scrub: newByteLimiter(cfg.ScrubRateMBps), parts: make(map[partKey]*partRepair), targets: make(map[targetKey]*target)}
}

// part returns (loading it from the store on first use) a partition's state.
func (m *maintenance) part(topic string, p uint32) (*partRepair, error) {
	m.mu.Lock()
	pr := m.parts[partKey{topic, p}]
	if pr == nil {
		pr = &partRepair{}
		m.parts[partKey{topic, p}] = pr
	}
	m.mu.Unlock()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.loaded {
		return pr, nil
	}
	st := m.io
	var err error
	if pr.repaired, err = st.Mark(slotstore.MarkRepaired, topic, p); err != nil {
		return nil, err
	}
	if pr.verified, err = st.Mark(slotstore.MarkVerified, topic, p); err != nil {
		return nil, err
	}
	if pr.dropped, err = st.Mark(slotstore.MarkDropped, topic, p); err != nil {
		return nil, err
	}
	if pr.holes, err = st.Holes(topic, p, 0, ^uint64(0)); err != nil {
		return nil, err
	}
	pr.loaded = true
	return pr, nil
}

// view is what a slot owner needs to answer scans below the birth: the
// repaired mark and the holes (shared, read-only). A store error leaves
// the mark at 0: everything below the birth stays "unknown".
func (m *maintenance) view(topic string, p uint32) (uint64, []uint64) {
	pr, err := m.part(topic, p)
	if err != nil {
		return 0, nil
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.repaired, pr.holes
}

// addTarget queues one offset for the repair loop and kicks it.
func (m *maintenance) addTarget(k targetKey, corrupt bool, id *stripe.ID) {
	m.mu.Lock()
	tg := m.targets[k]
	if tg == nil {
		if len(m.targets) >= m.cfg.MaxTargets {
			m.mu.Unlock()
			m.log.Warn("repair: target queue full, dropping", "topic", k.topic, "partition", k.partition, "offset", k.offset)
			return
		}
		tg = &target{first: time.Now()}
		m.targets[k] = tg
	}
	tg.corrupt = tg.corrupt || corrupt
	if id != nil {
		tg.inDoubt, tg.id = true, *id
	}
	m.mu.Unlock()
	m.targetsAdded.Store(true)
	m.kick()
}

func (m *maintenance) kick() {
	if pid := m.repairPID.Load(); pid != nil {
		kickLoop(m.n.system.Root, pid)
	} else if m.kicks != nil {
		select {
		case m.kicks <- struct{}{}:
		default:
		}
	}
}

// topics lists the catalog's topics (the catalog must be able to list them:
// meta.StaticCatalog and the metadata-watched catalog can).
func (m *maintenance) topics() []*meta.Topic {
	cat := m.io.Catalog()
	l, ok := cat.(interface{ Names() []string })
	if !ok {
		m.mu.Lock()
		if !m.warned {
			m.warned = true
			m.log.Warn("repair: the catalog cannot list topics; repair, scrub and retention do nothing")
		}
		m.mu.Unlock()
		return nil
	}
	var out []*meta.Topic
	for _, name := range l.Names() {
		if t, err := cat.Topic(name); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// spawnMaintenance starts the loop actors as children of the node actor.
func (n *Node) spawnMaintenance(ctx actor.Context) {
	m := n.maint
	if m.cfg.Disabled {
		return
	}
	loop := func(name string, first, every time.Duration, run func(context.Context), hooks ...func(bool)) *actor.PID {
		return ctx.Spawn(actorsys.Props(n.pool, func() actor.Actor {
			return &loopActor{name: name, first: first, every: every, run: run, log: m.log, hooks: hooks}
		}))
	}
	pass := func(ctx context.Context) { m.repairPass(ctx) }
	m.repairPID.Store(loop("repair", min(m.cfg.Interval, time.Second), m.cfg.Interval, pass, m.inDoubtSubscription()))
	if m.cfg.ScrubInterval > 0 {
		loop("scrub", m.cfg.ScrubInterval, m.cfg.ScrubInterval, m.scrubPass)
	}
	if m.cfg.RetentionInterval > 0 {
		loop("retention", min(m.cfg.RetentionInterval, time.Second), m.cfg.RetentionInterval, m.retentionPass)
	}
}

// Loop actor messages.
type (
	loopTick struct{}
	loopKick struct{}
	loopDone struct{ panicked any }
)

// loopActor runs run once after first, then every every after the
// previous pass ends (or at once when kicked during or between passes).
// The pass runs on its own goroutine with a context that the actor cancels
// (and waits out) when it stops or restarts. A panicking pass restarts the
// actor (supervision of the node actor).
type loopActor struct {
	name         string
	first, every time.Duration
	run          func(context.Context)
	hooks        []func(start bool) // called on start and on stop/restart
	log          *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	busy   bool
	kicked bool
	sched  *scheduler.TimerScheduler
	timer  scheduler.CancelFunc
}

func (a *loopActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.ctx, a.cancel = context.WithCancel(context.Background())
		a.sched = scheduler.NewTimerScheduler(ctx)
		for _, h := range a.hooks {
			h(true)
		}
		a.schedule(ctx, a.first)
	case *loopTick:
		a.start(ctx)
	case *loopKick:
		if a.busy {
			a.kicked = true
		} else {
			a.start(ctx)
		}
	case *loopDone:
		a.busy = false
		if m.panicked != nil {
			panic(fmt.Sprintf("%s pass panicked: %v", a.name, m.panicked))
		}
		if a.kicked {
			a.kicked = false
			a.schedule(ctx, 10*time.Millisecond)
		} else {
			a.schedule(ctx, a.every)
		}
	case *actor.Stopping, *actor.Restarting:
		a.stop()
	}
}

func (a *loopActor) schedule(ctx actor.Context, d time.Duration) {
	if a.timer != nil {
		a.timer()
	}
	a.timer = a.sched.SendOnce(d, ctx.Self(), &loopTick{})
}

func (a *loopActor) start(ctx actor.Context) {
	if a.busy || a.ctx.Err() != nil {
		return
	}
	if a.timer != nil {
		a.timer()
		a.timer = nil
	}
	a.busy = true
	done := make(chan struct{})
	a.done = done
	self, root, run, rctx := ctx.Self(), ctx.ActorSystem().Root, a.run, a.ctx
	go func() {
		defer close(done)
		var p any
		func() {
			defer func() {
				if p = recover(); p != nil {
					a.log.Error("maintenance pass panicked", "loop", a.name, "panic", p, "stack", string(debug.Stack()))
				}
			}()
			run(rctx)
		}()
		sendLoopDone(root, self, p)
	}()
}

func (a *loopActor) stop() {
	if a.timer != nil {
		a.timer()
		a.timer = nil
	}
	if a.cancel != nil {
		a.cancel()
	}
	if a.done != nil {
		<-a.done
	}
	for _, h := range a.hooks {
		h(false)
	}
}
