package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// The group coordinator of Kafka's classic consumer group protocol: the
// driver of core.KafkaGroup, one per group this gateway coordinates
// (the live gateway ranked first for the group, IsCoordinator). Groups
// live in the groups bucket (meta's kgroup.<name>), so any gateway can
// take a group over: it loads the record and the group rebalances once.
//
//   - First request for a group: its record is read (and, for a new
//     name, whether a native raidq group holds it: then every request
//     gets INVALID_GROUP_ID). Until that read succeeds requests get
//     COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
//   - Served from memory. Heartbeats, fetches and descriptions never wait
//     for the KV. Commits are written through, as Kafka acknowledges them
//     once replicated: an OffsetCommit is answered once its offsets are in
//     the record (OffsetFetch answers from the record as last read or
//     written here), so a gateway that dies or hands the group over loses
//     no acknowledged commit. One write per group is in flight at a time,
//     and the commits that arrive meanwhile share the next one. Other
//     state is written at most once per WriteEvery; failed writes are
//     retried with backoff (a trouble is logged once per change), their
//     commits answered with a code clients retry on.
//   - The new generation first. When a join phase ends, the group's state
//     is written at once with a compare-and-set on the record's revision
//     and only then do the JoinGroup replies go out. A lost
//     compare-and-set (another gateway wrote) re-reads the record: its
//     offsets stand, and a commit taken here goes over them only if that
//     partition's offset is unchanged and the generation has not moved
//     (reconcile); if the other gateway moved the generation past the last
//     one written here,
//     the group is reloaded from its record (the waiting requests get
//     NOT_COORDINATOR, so clients look the coordinator up again) and
//     rebalances. Two gateways that both think they coordinate cannot
//     both run one generation.
//   - A KV stall starts no rebalance and expires no session: nothing but
//     a new generation waits for it, and the core stops sessions while one
//     waits (core.KafkaGroup).
//   - A group this gateway stops coordinating is flushed (for up to
//     DrainTimeout) and dropped; its waiting requests get NOT_COORDINATOR.

// CoordinatorKV is where groups are kept: *meta.Store.
type CoordinatorKV interface {
	KafkaGroup(ctx context.Context, name string) (meta.KafkaGroup, uint64, error)
	PutKafkaGroup(ctx context.Context, g *meta.KafkaGroup, rev uint64) (uint64, error)
	DeleteKafkaGroup(ctx context.Context, name string, rev uint64) error
	KafkaGroups(ctx context.Context) ([]meta.KafkaGroup, error)
	NativeGroupExists(ctx context.Context, name string) (bool, error)
}

var _ CoordinatorKV = (*meta.Store)(nil)

// GroupLimits bound the coordinator; zero fields take the defaults.
type GroupLimits struct {
	// MaxGroups bounds the groups held in memory (10000): past it a new
	// group gets COORDINATOR_NOT_AVAILABLE until idle ones are dropped.
	MaxGroups int
	// MaxMembers bounds a group's members (meta.MaxKafkaMembers).
	MaxMembers int
	// MinSession and MaxSession bound session timeouts (6 s, 30 min);
	// MaxRebalance caps rebalance timeouts (30 min). At most
	// meta.MaxKafkaTimeout.
	MinSession, MaxSession, MaxRebalance time.Duration
	// InitialDelay is Kafka's group.initial.rebalance.delay.ms (3 s, as
	// Kafka; negative: none).
	InitialDelay time.Duration
	// WriteEvery is the least time between two writes of one group
	// (200 ms), a new generation and waiting OffsetCommits excepted.
	WriteEvery time.Duration
	// RetryMin and RetryMax bound the backoff of failed writes (100 ms, 5 s).
	RetryMin, RetryMax time.Duration
	// KVTimeout bounds each KV call (5 s), and how long an OffsetCommit
	// waits for its write.
	KVTimeout time.Duration
	// LoadWait bounds how long a request waits for its group's record (2 s).
	LoadWait time.Duration
	// DrainTimeout bounds flushing a group no longer coordinated here, and
	// Close (5 s).
	DrainTimeout time.Duration
	// IdleDrop is how long an idle group (no members, all written) stays
	// in memory after its last request (1 min).
	IdleDrop time.Duration
	// Tick is the period of sessions' and join phases' timers (100 ms).
	Tick time.Duration
}

func (l *GroupLimits) defaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if l.MaxGroups <= 0 {
		l.MaxGroups = 10000
	}
	if l.MaxMembers <= 0 || l.MaxMembers > meta.MaxKafkaMembers {
		l.MaxMembers = meta.MaxKafkaMembers
	}
	def(&l.MinSession, 6*time.Second)
	def(&l.MaxSession, 30*time.Minute)
	def(&l.MaxRebalance, 30*time.Minute)
	l.MaxSession, l.MaxRebalance = min(l.MaxSession, meta.MaxKafkaTimeout), min(l.MaxRebalance, meta.MaxKafkaTimeout)
	if l.InitialDelay == 0 {
		l.InitialDelay = 3 * time.Second
	}
	l.InitialDelay = max(l.InitialDelay, 0)
	def(&l.WriteEvery, 200*time.Millisecond)
	def(&l.RetryMin, 100*time.Millisecond)
	def(&l.RetryMax, 5*time.Second)
	def(&l.KVTimeout, 5*time.Second)
	def(&l.LoadWait, 2*time.Second)
	def(&l.DrainTimeout, 5*time.Second)
	def(&l.IdleDrop, time.Minute)
	def(&l.Tick, 100*time.Millisecond)
}

// CoordinatorConfig configures NewCoordinator.
type CoordinatorConfig struct {
	KV CoordinatorKV
	// IsCoordinator says whether this gateway coordinates group now.
	IsCoordinator func(group string) bool
	Logger        *slog.Logger
	// Clock is the monotonic clock in ns (nil: time since NewCoordinator).
	Clock func() int64
	// Wall stamps commits (nil: time.Now).
	Wall   func() time.Time
	Limits GroupLimits
	// ValidPartition says whether a commit's partition exists (nil: all
	// do); others get UNKNOWN_TOPIC_OR_PARTITION.
	ValidPartition func(topic string, partition int32) bool
	// IDRand gives the random bytes of new member ids (nil: crypto/rand);
	// the simulation seeds it so a seed replays. It must be safe for
	// concurrent use.
	IDRand io.Reader
	// Bugs re-creates mistakes on purpose, for the tests that show the
	// simulation (scenarios/sim/kafka_group.go) catches them. Zero: none.
	Bugs CoordinatorBugs

	manualTick bool // tests: no ticker; they call tick
}

// CoordinatorBugs are deliberate mistakes, for tests only.
type CoordinatorBugs struct {
	// TakeoverWithoutOffsets: a gateway that loads a group's record takes
	// its members and generation but not its committed offsets.
	TakeoverWithoutOffsets bool
}

// ErrGroupsUnwritten: Close could not write every group's state.
var ErrGroupsUnwritten = errors.New("kafka groups: state not written")

// CoordinatorVersions are the versions the coordinator answers, by API
// key; others are answered UNSUPPORTED_VERSION.
var CoordinatorVersions = map[kmsg.Key][2]int16{
	kmsg.JoinGroup:      {0, 9},
	kmsg.SyncGroup:      {0, 5},
	kmsg.Heartbeat:      {0, 4},
	kmsg.LeaveGroup:     {0, 5},
	kmsg.OffsetCommit:   {0, 9},
	kmsg.OffsetFetch:    {0, 9},
	kmsg.DescribeGroups: {0, 6},
	kmsg.ListGroups:     {0, 5},
	kmsg.DeleteGroups:   {0, 3},
}

// Coordinator coordinates the Kafka groups this gateway is ranked first for.
type Coordinator struct {
	cfg   CoordinatorConfig
	lim   GroupLimits
	core  core.KafkaGroupConfig
	log   *slog.Logger
	start time.Time
	ctx   context.Context // KV calls; canceled at the end of Close
	stop  context.CancelFunc
	reqs  atomic.Uint64 // request ids given to the cores

	mu     sync.Mutex
	groups map[string]*kgroup
	closed bool
	full   bool // MaxGroups reached, logged
	// loadTrouble: the last load failed (logged once until one works).
	loadTrouble bool

	spawnMu  sync.Mutex // a leaf lock: guards wg.Add against Close's Wait
	finished bool
	wg       sync.WaitGroup
	wrote    chan struct{} // a write finished (Close waits on it)
	quit     chan struct{}
	tickDone chan struct{}
}

// NewCoordinator starts a coordinator.
func NewCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	if cfg.KV == nil || cfg.IsCoordinator == nil {
		return nil, fmt.Errorf("%w: the group coordinator needs a KV and IsCoordinator", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Wall == nil {
		cfg.Wall = time.Now
	}
	c := &Coordinator{cfg: cfg, lim: cfg.Limits, log: cfg.Logger, start: time.Now(), groups: make(map[string]*kgroup),
		wrote: make(chan struct{}, 1), quit: make(chan struct{}), tickDone: make(chan struct{})}
	c.lim.defaults()
	c.core = core.KafkaGroupConfig{MinSession: int64(c.lim.MinSession), MaxSession: int64(c.lim.MaxSession),
		MaxRebalance: int64(c.lim.MaxRebalance), InitialDelay: int64(c.lim.InitialDelay), MaxMembers: c.lim.MaxMembers,
		MaxProtocols: 16, MaxString: meta.MaxKafkaString, MaxMemberData: meta.MaxKafkaMemberData,
		MaxStateBytes: meta.KafkaMembersBudget}
	c.ctx, c.stop = context.WithCancel(context.Background())
	if cfg.manualTick {
		close(c.tickDone)
	} else {
		go c.run()
	}
	return c, nil
}

func (c *Coordinator) now() int64 {
	if c.cfg.Clock != nil {
		return c.cfg.Clock()
	}
	return int64(time.Since(c.start))
}

func (c *Coordinator) run() {
	defer close(c.tickDone)
	t := time.NewTicker(c.lim.Tick)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
			c.tick()
		}
	}
}

// spawn runs fn on a goroutine Close waits for; false once Close is past
// its drain.
func (c *Coordinator) spawn(fn func()) bool {
	c.spawnMu.Lock()
	defer c.spawnMu.Unlock()
	if c.finished {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
	return true
}

// group finds (loading it if needed) the entry of a group this gateway
// coordinates, or the code to answer with.
func (c *Coordinator) group(ctx context.Context, name string) (*kgroup, core.KafkaCode) {
	if meta.ValidKafkaGroup(name) != nil {
		return nil, core.KafkaInvalidGroupID
	}
	if !c.cfg.IsCoordinator(name) {
		return nil, core.KafkaNotCoordinator
	}
	g, code := c.entry(name)
	if code != core.KafkaNone {
		return nil, code
	}
	t := time.NewTimer(c.lim.LoadWait)
	defer t.Stop()
	select {
	case <-g.ready:
	case <-t.C:
		return nil, core.KafkaCoordinatorLoadInProgress
	case <-ctx.Done():
		return nil, core.KafkaCoordinatorLoadInProgress
	}
	if g.loadErr != nil {
		return nil, core.KafkaCoordinatorLoadInProgress
	}
	return g, core.KafkaNone
}

// entry returns name's entry, creating it and starting its load.
func (c *Coordinator) entry(name string) (*kgroup, core.KafkaCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, core.KafkaCoordinatorNotAvailable
	}
	if g := c.groups[name]; g != nil {
		return g, core.KafkaNone
	}
	if len(c.groups) >= c.lim.MaxGroups {
		if !c.full {
			c.log.Warn("kafka groups: too many groups held; new ones wait until idle ones are dropped", "limit", c.lim.MaxGroups)
		}
		c.full = true
		return nil, core.KafkaCoordinatorNotAvailable
	}
	c.full = false
	g := newKGroup(name)
	c.groups[name] = g
	if !c.spawn(func() { c.load(g) }) {
		delete(c.groups, name)
		return nil, core.KafkaCoordinatorNotAvailable
	}
	return g, core.KafkaNone
}

// load reads a group's record; a new name is checked against native
// groups. A failure drops the entry: the next request tries again.
func (c *Coordinator) load(g *kgroup) {
	ctx, cancel := context.WithTimeout(c.ctx, c.lim.KVTimeout)
	defer cancel()
	rec, rev, err := c.cfg.KV.KafkaGroup(ctx, g.name)
	native := false
	if err == nil && rev == 0 {
		native, err = c.cfg.KV.NativeGroupExists(ctx, g.name)
	}
	c.mu.Lock()
	if err != nil && !c.loadTrouble {
		c.log.Warn("kafka groups: loading a group failed; clients retry", "group", g.name, "err", err)
	} else if err == nil && c.loadTrouble {
		c.log.Info("kafka groups: loading groups works again")
	}
	c.loadTrouble = err != nil
	if err != nil && c.groups[g.name] == g {
		delete(c.groups, g.name)
	}
	c.mu.Unlock()
	if err != nil {
		g.loadErr = err
		close(g.ready)
		return
	}
	if native {
		c.log.Warn("kafka groups: refusing a Kafka group named like a native raidq consumer group (INVALID_GROUP_ID)",
			"group", g.name)
	}
	g.mu.Lock()
	g.init(c, rec, rev, native, c.now())
	if g.core.State() == core.KafkaPreparingRebalance {
		c.log.Info("kafka groups: took the group over; its members rejoin (one rebalance)", "group", g.name,
			"generation", g.core.Generation(), "members", len(rec.Members))
	}
	g.mu.Unlock()
	close(g.ready)
}

// tick runs the cores' timers, drops groups no longer coordinated here
// (after flushing them) and idle ones, and starts due writes.
func (c *Coordinator) tick() {
	now := c.now()
	for _, g := range c.loaded() {
		ours := c.cfg.IsCoordinator(g.name)
		g.mu.Lock()
		if !ours && !g.leaving {
			c.log.Info("kafka groups: no longer this gateway's group; flushing and dropping it", "group", g.name)
			g.leave(now, core.KafkaNotCoordinator)
		}
		if !g.leaving && g.core != nil {
			c.apply(g, g.core.Tick(now))
		}
		c.maybeWrite(g, now, false)
		drop := g.droppable(c, now)
		if drop {
			g.failCommits(int16(core.KafkaNotCoordinator))
		}
		g.mu.Unlock()
		if drop {
			c.forget(g)
		}
	}
}

// loaded lists the entries whose load finished.
func (c *Coordinator) loaded() []*kgroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*kgroup, 0, len(c.groups))
	for _, g := range c.groups {
		select {
		case <-g.ready:
			if g.loadErr == nil {
				out = append(out, g)
			}
		default:
		}
	}
	return out
}

func (c *Coordinator) forget(g *kgroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[g.name] == g {
		delete(c.groups, g.name)
	}
}

// apply carries out a core's output (g.mu held): replies to the waiting
// requests, the state to write, the log.
func (c *Coordinator) apply(g *kgroup, out core.KafkaOutput) {
	for i := range out.Joins {
		g.answer(out.Joins[i].Req, reply{join: &out.Joins[i]})
	}
	for i := range out.Syncs {
		g.answer(out.Syncs[i].Req, reply{sync: &out.Syncs[i]})
	}
	for _, r := range out.Removed {
		c.log.Info("kafka groups: member removed", "group", g.name, "member", r.Member, "reason", r.Reason)
	}
	if out.Rebalance != "" {
		c.log.Info("kafka groups: rebalancing", "group", g.name, "generation", g.core.Generation(), "reason", out.Rebalance)
	}
	if out.Released != 0 {
		c.log.Info("kafka groups: generation started", "group", g.name, "generation", out.Released)
	}
	if p := out.Persist; p != nil {
		g.snap, g.seq, g.dirty = p.State, p.Seq, true
		if p.Barrier {
			g.barrier = p.Seq
			c.maybeWrite(g, c.now(), false)
		}
	}
}

// wait waits for request req's reply, for at most bound.
func (c *Coordinator) wait(ctx context.Context, g *kgroup, req uint64, ch chan reply, bound time.Duration) reply {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
	case <-t.C:
	case <-c.quit:
	}
	g.mu.Lock()
	delete(g.waiters, req)
	g.mu.Unlock()
	select {
	case r := <-ch: // answered meanwhile
		return r
	default:
		return reply{code: core.KafkaCoordinatorNotAvailable}
	}
}

// Close stops the timers, answers the waiting requests, writes what is
// not yet written (for up to DrainTimeout) and stops every goroutine.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	groups := make([]*kgroup, 0, len(c.groups))
	for _, g := range c.groups {
		groups = append(groups, g)
	}
	c.mu.Unlock()
	close(c.quit)
	<-c.tickDone
	unwritten := c.drain(groups)
	c.spawnMu.Lock()
	c.finished = true
	c.spawnMu.Unlock()
	c.stop()
	c.wg.Wait()
	for _, g := range groups {
		g.mu.Lock()
		g.failCommits(int16(core.KafkaCoordinatorNotAvailable)) // not written: retried elsewhere
		g.mu.Unlock()
	}
	if unwritten > 0 {
		c.log.Warn("kafka groups: closed with groups not written", "groups", unwritten)
		return fmt.Errorf("%w: %d groups", ErrGroupsUnwritten, unwritten)
	}
	return nil
}

// drain writes every group's pending state, waiting out backoffs, for up
// to DrainTimeout; it returns how many groups stayed unwritten.
func (c *Coordinator) drain(groups []*kgroup) int {
	deadline := time.NewTimer(c.lim.DrainTimeout)
	defer deadline.Stop()
	for {
		pending := 0
		for _, g := range groups {
			select {
			case <-g.ready:
			default:
				continue // its load ends with Close's cancel
			}
			g.mu.Lock()
			if g.loadErr == nil {
				g.leave(c.now(), core.KafkaCoordinatorNotAvailable)
				c.maybeWrite(g, c.now(), true)
				if g.dirty || g.writing {
					pending++
				}
			}
			g.mu.Unlock()
		}
		if pending == 0 {
			return 0
		}
		retry := time.NewTimer(c.lim.RetryMin)
		select {
		case <-c.wrote:
		case <-retry.C:
		case <-deadline.C:
			retry.Stop()
			return pending
		}
		retry.Stop()
	}
}

type clientKey struct{}

type clientInfo struct{ id, host string }

// WithClient tells the coordinator, through the request's context, the
// client id (of the request header) and host a JoinGroup comes from:
// DescribeGroups shows them.
func WithClient(ctx context.Context, clientID, host string) context.Context {
	return context.WithValue(ctx, clientKey{}, clientInfo{id: clientID, host: host})
}

func clientOf(ctx context.Context) clientInfo {
	ci, _ := ctx.Value(clientKey{}).(clientInfo)
	return ci
}
