package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// RepairPorts is everything a node's repair loop (repair_pass.go,
// repair_net.go), its scrub (scrub.go) and the in-doubt re-append
// (reappend.go) reach outside themselves through. In a node it is the
// node itself (nodePorts: its config, store, clock watch, peer client,
// slot owners and connection); a simulation implements it over simulated
// stores, peers and clocks and runs the same code (RepairLoop).
// Retention (retention.go) and the loop actors still use the node
// directly. Methods may be called from several goroutines at once.
type RepairPorts interface {
	// ID is this node's id, its name in the topics' ensembles.
	ID() string
	// Catalog is the node's topic catalog; repair, scrub and retention
	// walk every topic it lists (it must have Names() []string).
	Catalog() meta.Catalog
	// Now is the node's clock (unix ns; Config.Now).
	Now() int64
	// ClockOff says the clock watch found this node's clock off its
	// peers' (clock_watch.go): no repair pass runs then.
	ClockOff() bool
	// Birth is the birth of the store's incarnation (slotstore.Incarnation).
	Birth() uint64

	// The node's own slots and repair marks (slotstore.Store).
	Mark(kind slotstore.MarkKind, topic string, p uint32) (uint64, error)
	Holes(topic string, p uint32, from, to uint64) ([]uint64, error)
	Scan(topic string, p uint32, from, to uint64, fn func(off uint64, shard []byte) bool) error
	Get(k slotstore.Key) ([]byte, error)
	// SaveMarks makes holes and, when mark > 0, the raised mark of kind
	// durable (one store commit) and returns once they are, or ctx's error.
	SaveMarks(ctx context.Context, topic string, p uint32, kind slotstore.MarkKind, mark uint64, holes []uint64) error

	// Request sends one request to another node over the link of the
	// node's peer client (actors.Client.Request); a timeout is an
	// actors.ErrLinkTimeout.
	Request(ctx context.Context, node, subject string, data []byte, timeout time.Duration) ([]byte, error)
	// RepairWrite writes a rebuilt shard through its slot owner
	// (core.Owner.RepairWrite) and answers once it is durable.
	RepairWrite(ctx context.Context, t *meta.Topic, p uint32, shard []byte) (bus.Status, string, error)
	// Reappend writes an in-doubt stripe again as a producer would
	// (actors.Client.Reappend) and returns its committed offset.
	Reappend(ctx context.Context, t *meta.Topic, p uint32, id stripe.ID, payload []byte) (uint64, error)
	// Subscribe and Publish are the node's connection, for the readers'
	// in-doubt reports and their hand-overs.
	Subscribe(subject string, fn func(subject string, data []byte)) (unsubscribe func(), err error)
	Publish(subject string, data []byte) error
}

// RepairBugs are deliberate mistakes the simulation's TestSimCatchesBugs
// turns on (RepairConfig.Bugs) to show its checks catch them; never set
// otherwise.
type RepairBugs struct {
	// SkipFix: the walk settles ranges as if their fixes were applied,
	// without applying them.
	SkipFix bool
	// NoProof: rebuild takes a fetched source's shard as this node's (its
	// index rewritten, CRCs valid) instead of core.RebuildShard.
	NoProof bool
	// NoLocal: the walk plans without this node's own slots, so it
	// "fixes" slots that hold good shards.
	NoLocal bool
}

// nodePorts is a node's RepairPorts.
type nodePorts struct{ n *Node }

var _ RepairPorts = nodePorts{}

func (p nodePorts) ID() string            { return p.n.cfg.ID }
func (p nodePorts) Catalog() meta.Catalog { return p.n.cfg.Catalog }
func (p nodePorts) Now() int64            { return p.n.cfg.Now() }
func (p nodePorts) ClockOff() bool        { return p.n.clock.off.Load() }
func (p nodePorts) Birth() uint64         { return p.n.cfg.Store.Incarnation().Birth }

func (p nodePorts) Mark(kind slotstore.MarkKind, topic string, part uint32) (uint64, error) {
	return p.n.cfg.Store.Mark(kind, topic, part)
}

func (p nodePorts) Holes(topic string, part uint32, from, to uint64) ([]uint64, error) {
	return p.n.cfg.Store.Holes(topic, part, from, to)
}

func (p nodePorts) Scan(topic string, part uint32, from, to uint64, fn func(uint64, []byte) bool) error {
	return p.n.cfg.Store.Scan(topic, part, from, to, fn)
}

func (p nodePorts) Get(k slotstore.Key) ([]byte, error) { return p.n.cfg.Store.Get(k) }

func (p nodePorts) SaveMarks(ctx context.Context, topic string, part uint32, kind slotstore.MarkKind, mark uint64, holes []uint64) error {
	b := &slotstore.Batch{}
	for _, h := range holes {
		b.PutHole(topic, part, h)
	}
	if mark > 0 {
		b.RaiseMark(kind, topic, part, mark)
	}
	return p.n.maint.commitWait(ctx, b)
}

func (p nodePorts) Request(ctx context.Context, node, subject string, data []byte, timeout time.Duration) ([]byte, error) {
	c, err := p.n.peers.get(p.n)
	if err != nil {
		return nil, err
	}
	return c.Request(ctx, node, subject, data, timeout)
}

func (p nodePorts) RepairWrite(ctx context.Context, t *meta.Topic, part uint32, shard []byte) (bus.Status, string, error) {
	return p.n.repairWriteLocal(ctx, t, part, shard)
}

func (p nodePorts) Reappend(ctx context.Context, t *meta.Topic, part uint32, id stripe.ID, payload []byte) (uint64, error) {
	c, err := p.n.peers.get(p.n)
	if err != nil {
		return 0, err
	}
	return c.Reappend(ctx, t, part, id, payload)
}

func (p nodePorts) Subscribe(subject string, fn func(string, []byte)) (func(), error) {
	sub, err := p.n.cfg.Conn.Subscribe(subject, func(m *nats.Msg) { fn(m.Subject, m.Data) })
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func (p nodePorts) Publish(subject string, data []byte) error {
	return p.n.cfg.Conn.Publish(subject, data)
}

// RepairLoop is a node's repair loop (repair passes with their queued
// targets and the in-doubt re-append) on a goroutine of its own, outside
// an actor system, over ports of the caller's: the simulation runs the
// shipped repair this way. Its schedule is the loop actor's (repair.go):
// the first pass after min(Interval, 1s), then every Interval after the
// previous one ends, 10 ms after it when kicked during it (a new target),
// at once when kicked between passes.
type RepairLoop struct {
	m    *maintenance
	kick chan struct{}
	// passed, if set, is called after each pass that ran to its end.
	passed func(start time.Time)
}

// RepairLoopConfig configures a RepairLoop.
type RepairLoopConfig struct {
	Repair  RepairConfig
	Ports   RepairPorts
	Cluster string       // for the subjects of scans and in-doubt reports
	Logger  *slog.Logger // nil: slog.Default()
	Stats   *Stats       // nil: counted nowhere
	// Passed, if set, is called after each pass that ran to its end with
	// the time it started.
	Passed func(start time.Time)
}

// NewRepairLoop makes a repair loop; Run runs it.
func NewRepairLoop(cfg RepairLoopConfig) (*RepairLoop, error) {
	subj, err := bus.NewSubjects(cfg.Cluster)
	if err != nil {
		return nil, fmt.Errorf("repair loop: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	l := &RepairLoop{kick: make(chan struct{}, 1), passed: cfg.Passed}
	l.m = newMaintenanceOn(cfg.Ports, subj, cfg.Repair, cfg.Logger, cfg.Stats)
	l.m.kicks = l.kick
	return l, nil
}

// Run runs passes until ctx is done, subscribed to the in-doubt reports
// meanwhile. A kick and a due timer at one instant start one pass, and
// the kick counts as taken by it (never left for after it), so the
// schedule does not depend on which the select picked.
func (l *RepairLoop) Run(ctx context.Context) {
	sub := l.m.inDoubtSubscription()
	sub(true)
	defer sub(false)
	t := time.NewTimer(min(l.m.cfg.Interval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-l.kick:
		default:
		}
		start := time.Now()
		done := l.m.repairPass(ctx)
		if ctx.Err() != nil {
			return
		}
		if done && l.passed != nil {
			l.passed(start)
		}
		select {
		case <-l.kick:
			t.Reset(10 * time.Millisecond)
		default:
			t.Reset(l.m.cfg.Interval)
		}
	}
}
