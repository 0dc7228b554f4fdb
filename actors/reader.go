package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/internal/actorsys"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe/quorum"
)

// ReaderConfig configures one partition reader.
type ReaderConfig struct {
	Topic     string
	Partition int
	From      core.Position
	// Core overrides the reader rules derived from the topic (zero = derived).
	Core core.ReaderConfig
	// ScanTimeout bounds one node's answer to one scan page (default 1s;
	// at most the link's timeout, ClientConfig.Link).
	ScanTimeout time.Duration
	// SuspectTimeout bounds the answer of a node whose last scan timed out
	// (default 150ms), until it answers again: a hung node must not cost
	// every scan the full ScanTimeout.
	SuspectTimeout time.Duration
	// Poll is the smallest scan window at the clock's head, and how long
	// to wait when caught up with it or when the nodes closed less than
	// asked (default PollFor the topic: A/5, between 2ms and 25ms). Every
	// main scan is a closing scan of the whole ensemble (a request to each
	// node; no store write), so this sets the reader's fixed cost, and it
	// adds at most Poll to the delivery latency of about A.
	Poll time.Duration
	// Sink receives each batch of deliveries, in order, on a goroutine of
	// its own; the reader does not scan further until it returns.
	Sink func([]core.Delivery)
	// OnReport receives the reader's in-doubt/corrupt/stall reports (optional).
	OnReport func(core.Output)
	// Bugs re-creates fixed mistakes of the reader actor, for the
	// simulation's tests only (scenarios/sim TestSimCatchesBugs); the read
	// path's own live in Core.Bugs (core.ReaderBugs). Zero in production.
	Bugs ReaderBugs
}

// ReaderBugs are fixed mistakes of the reader actor, re-created for the
// simulation's tests only.
type ReaderBugs struct {
	// UnheardAsEmpty takes a node whose scan failed (no reply in time, no
	// responders, a bad page) for one that answered with nothing up to the
	// scan's end.
	UnheardAsEmpty bool
}

// DefaultReaderPoll is ReaderConfig.Poll's default for the default
// profile (A = 250ms), and its upper bound: delivery then takes about
// 250ms + 25ms, within D + 50ms.
const DefaultReaderPoll = 25 * time.Millisecond

// PollFor is the reader poll for a topic's parameters: a fifth of the
// accept window, between 2ms and DefaultReaderPoll. Delivery takes about
// A plus the poll, so the poll scales with A, and a low-latency topic
// (A = 20ms) polls every 4ms.
func PollFor(p quorum.Params) time.Duration {
	return min(max(p.AcceptWindow/5, 2*time.Millisecond), DefaultReaderPoll)
}

type readerPump struct{}
type scanDone struct {
	sc      core.Scan
	results []core.NodeResult
}
type sinkDone struct{}

// readerActor drives core.Reader: it runs the scans the core asks for on
// every node of the ensemble (in parallel, paged), feeds the results back,
// and hands deliveries to the sink (docs/design.md#read-path).
type readerActor struct {
	c        *Client
	topic    *meta.Topic
	timing   *meta.Topic // the record the reader's timing was last taken from (refreshTiming)
	cfg      ReaderConfig
	core     *core.Reader
	log      *slog.Logger
	busy     bool // a scan or a sink call is under way
	sinkCh   chan []core.Delivery
	sinkQuit chan struct{}
	sinking  uint64 // the frontier of the deliveries the sink is taking
	stalled  time.Time
	holdMain time.Time       // no main scan before it (core.Output.Short)
	idle     uint            // main scans in a row that found nothing (poll)
	self     readerSelf      // set at Started
	m        *metrics.Reader // nil: no metrics
	stats    *readerStats
	suspect  []atomic.Bool // by ensemble position: the last scan timed out
}

// readerStats is what the reader actor publishes for its handle.
type readerStats struct {
	mu       sync.Mutex
	low      core.Position // core.Reader.LowWater
	pos      core.Position // core.Reader.Pos
	deferred int
	// handed is the scanned frontier whose deliveries the sink has taken:
	// every record the reader could read below it was handed over.
	handed uint64
}

// Reader is the handle of a reader actor.
type Reader struct {
	c     *Client
	pid   *actor.PID
	stats *readerStats
}

// LowWater is the lowest position a consumer of this reader may commit:
// below its lowest unresolved in-doubt offset (core.Reader.LowWater).
func (r *Reader) LowWater() core.Position {
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	return r.stats.low
}

// Pos is the position the reader delivers next (core.Reader.Pos): every
// record before it was delivered, passed as void, or is deferred in
// doubt (LowWater).
func (r *Reader) Pos() core.Position {
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	return r.stats.pos
}

// Handed is the offset below which every record the reader could read
// has been handed to its sink (the scanned frontier once the sink has
// taken that scan's deliveries; in-doubt offsets below it come late).
func (r *Reader) Handed() uint64 {
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	return r.stats.handed
}

// Deferred is the number of in-doubt offsets the reader still watches.
func (r *Reader) Deferred() int {
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	return r.stats.deferred
}

func (s *readerStats) setHanded(f uint64) {
	s.mu.Lock()
	s.handed = max(s.handed, f)
	s.mu.Unlock()
}

func (s *readerStats) set(low, pos core.Position, deferred int) {
	s.mu.Lock()
	s.low, s.pos, s.deferred = low, pos, deferred
	s.mu.Unlock()
}

// NewReader spawns a reader of one partition.
func (c *Client) NewReader(cfg ReaderConfig) (*Reader, error) {
	t, err := c.cfg.Catalog.Topic(cfg.Topic)
	if err != nil {
		return nil, err
	}
	if cfg.Partition < 0 || cfg.Partition >= t.Partitions {
		return nil, fmt.Errorf("topic %s has partitions 0..%d, not %d", t.Name, t.Partitions-1, cfg.Partition)
	}
	if cfg.Core.Params.N == 0 {
		p := t.Params
		p.AcceptWindow = time.Duration(t.AcceptPlan().Max())
		cfg.Core = core.DefaultReaderConfig(p)
	}
	if cfg.From.Offset < t.Created {
		cfg.From = core.Position{Offset: t.Created} // nothing exists before the topic
	}
	if cfg.ScanTimeout <= 0 {
		cfg.ScanTimeout = time.Second
	}
	if cfg.SuspectTimeout <= 0 {
		cfg.SuspectTimeout = min(150*time.Millisecond, cfg.ScanTimeout)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = PollFor(t.Params)
	}
	ra := &readerActor{c: c, topic: t, cfg: cfg, core: core.NewReader(cfg.Core, cfg.From),
		log: c.cfg.Logger.With("topic", t.Name, "partition", cfg.Partition), m: c.metrics.Reader(t.Name, cfg.Partition),
		stats: &readerStats{}, suspect: make([]atomic.Bool, t.Params.N)}
	ra.stats.set(ra.core.LowWater(), ra.core.Pos(), 0)
	pid, err := c.spawn(actorsys.Props(c.pool, func() actor.Actor { return ra }))
	if err != nil {
		return nil, err
	}
	return &Reader{c: c, pid: pid, stats: ra.stats}, nil
}

// Close stops the reader (readers come and go with leases and group
// rebalances, so the client forgets it).
func (r *Reader) Close() {
	_ = r.c.system.Root.PoisonFuture(r.pid).Wait()
	r.c.forget(r.pid)
}

func (a *readerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self = readerSelf{root: ctx.ActorSystem().Root, pid: ctx.Self(), sched: scheduler.NewTimerScheduler(ctx)}
		a.startSink()
		a.self.pump()
	case *readerPump:
		a.pump()
	case *scanDone:
		a.applyScan(m)
	case *sinkDone:
		a.afterSink()
	case *actor.Stopping:
		close(a.sinkQuit)
		a.m.Deferred(0, 0, 0)
	}
}

// readerSelf is a reader actor's own mailbox, for its sink goroutine, its
// scans' goroutines and its timers: each method sends the message that
// the readerActor method of the same name handles (on the actor's
// goroutine, by way of Receive).
type readerSelf struct {
	root  *actor.RootContext
	pid   *actor.PID
	sched *scheduler.TimerScheduler
}

// pump: readerActor.pump, now.
func (s readerSelf) pump() { s.root.Send(s.pid, &readerPump{}) }

// pumpAfter: readerActor.pump, after d.
func (s readerSelf) pumpAfter(d time.Duration) { s.sched.SendOnce(d, s.pid, &readerPump{}) }

// applyScan: a finished scan for readerActor.applyScan.
func (s readerSelf) applyScan(sc core.Scan, results []core.NodeResult) {
	s.root.Send(s.pid, &scanDone{sc: sc, results: results})
}

// afterSink: readerActor.afterSink, the sink having taken its deliveries.
func (s readerSelf) afterSink() { s.root.Send(s.pid, &sinkDone{}) }

// startSink runs the sink on its own goroutine so a slow consumer never
// blocks the actor; the reader waits for afterSink before scanning on.
func (a *readerActor) startSink() {
	a.sinkCh, a.sinkQuit = make(chan []core.Delivery), make(chan struct{})
	self := a.self
	go func() {
		for {
			select {
			case ds := <-a.sinkCh:
				a.cfg.Sink(ds)
				self.afterSink()
			case <-a.sinkQuit:
				return
			}
		}
	}()
}

// afterSink scans on once the sink has taken the last deliveries.
func (a *readerActor) afterSink() {
	a.busy = false
	a.stats.setHanded(a.sinking)
	a.pump()
}

func (a *readerActor) pump() {
	if a.busy {
		return
	}
	a.refreshTiming()
	now := a.c.cfg.Now()
	sc, ok := a.core.Next(now)
	if !ok {
		a.self.pumpAfter(a.cfg.Poll)
		return
	}
	// At the clock's head (the scan ends at now-D), wait until the window
	// spans Poll: else a caught-up reader rescans the few milliseconds its
	// last scan took, back to back, and every such scan costs each node a
	// request and a seal commit.
	if head := uint64(max(now-a.core.ReadDelay(), 0)); !sc.Rescan && sc.To >= head && sc.To-sc.From < uint64(a.poll()) {
		a.self.pumpAfter(a.poll() - time.Duration(sc.To-sc.From))
		return
	}
	if !sc.Rescan && time.Now().Before(a.holdMain) {
		// The nodes closed less than the last main scan asked: wait for
		// their clocks rather than ask again at once.
		a.self.pumpAfter(time.Until(a.holdMain))
		return
	}
	a.busy = true
	self := a.self
	go func() { self.applyScan(sc, a.scanAll(sc)) }()
}

// refreshTiming takes up a `topic alter` of the read delay or the accept
// window (core.Reader.SetTiming) when the catalog's record changed; the
// lookup is a map read.
func (a *readerActor) refreshTiming() {
	t, err := a.c.cfg.Catalog.Topic(a.topic.Name)
	if err != nil || t == a.timing {
		return
	}
	a.timing = t
	a.core.SetTiming(int64(t.Params.ReadDelay), t.AcceptPlan().Max())
}

// maxIdleDoublings bounds the idle reader's poll at 4x Poll.
const maxIdleDoublings = 2

// poll is the wait between main scans at the head: Poll, doubled for each
// main scan in a row that found the partition empty, up to 4x Poll. An
// idle partition's reader costs every node a request per poll (a
// low-latency topic polls every 4 ms: some 1500 requests a second per
// reader); backing off to 16 ms there costs the first record after a quiet
// spell at most 12 ms, and a busy partition polls at Poll.
func (a *readerActor) poll() time.Duration { return a.cfg.Poll << a.idle }

// noteIdle counts main scans in a row that found no slot on any node.
func (a *readerActor) noteIdle(results []core.NodeResult) {
	for _, r := range results {
		if len(r.Entries) > 0 {
			a.idle = 0
			return
		}
	}
	a.idle = min(a.idle+1, maxIdleDoublings)
}

// applyScan feeds a finished scan to the core and ships the deliveries.
func (a *readerActor) applyScan(m *scanDone) {
	out := a.core.Apply(a.c.cfg.Now(), m.sc, m.results)
	if !m.sc.Rescan {
		a.noteIdle(m.results)
	}
	if out.Short {
		a.holdMain = time.Now().Add(a.poll())
	}
	a.stats.set(a.core.LowWater(), a.core.Pos(), a.core.Deferred())
	a.report(out)
	if len(out.Deliveries) == 0 {
		a.stats.setHanded(a.core.Frontier())
		a.busy = false
		if out.Stalled != "" {
			a.self.pumpAfter(50 * time.Millisecond)
			return
		}
		a.pump()
		return
	}
	a.sinking = a.core.Frontier()
	select {
	case a.sinkCh <- out.Deliveries:
	case <-a.sinkQuit:
	}
}

func (a *readerActor) report(out core.Output) {
	a.m.Applied(len(out.Deliveries), out.Voids, out.Duplicates, len(out.InDoubt), len(out.Corrupt), out.Stalled != "")
	late := 0
	for _, d := range out.Deliveries {
		if d.Late {
			late++
		}
	}
	a.m.Deferred(a.core.Deferred(), len(out.Resolved), late)
	if len(out.Resolved) > 0 || late > 0 {
		a.log.Info("in-doubt offsets resolved", "resolved", len(out.Resolved), "late_records", late, "still_pending", a.core.Deferred())
	}
	for _, d := range out.InDoubt {
		a.log.Warn("offset in doubt: passed after waiting for unheard nodes; kept and re-asked until resolved (groups commit no further)",
			"offset", d.Offset, "stripe", d.Stripe.String(), "shards_seen", d.Seen, "unheard_positions", d.Unheard,
			"pending", a.core.Deferred())
		// The nodes' repair loops re-append it if it proves decodable later.
		r := bus.InDoubtReport{Topic: a.topic.Name, Partition: uint32(a.cfg.Partition), Offset: d.Offset,
			Producer: d.Stripe.Producer, Seq: d.Stripe.Seq}
		_ = a.c.bus().Publish(a.c.subjects.InDoubt(a.topic.Name, uint32(a.cfg.Partition)), r.Marshal())
	}
	for _, c := range out.Corrupt {
		a.log.Warn("corrupt shard treated as missing", "offset", c.Offset, "position", c.Node, "err", c.Err)
	}
	if out.Stalled != "" && time.Since(a.stalled) > 5*time.Second {
		a.stalled = time.Now()
		a.log.Warn("reader stalled", "why", out.Stalled)
	}
	if a.cfg.OnReport != nil {
		a.cfg.OnReport(out)
	}
}

// scanAll scans sc on each listed ensemble position in parallel. Runs on
// its own goroutine, never in the actor.
func (a *readerActor) scanAll(sc core.Scan) []core.NodeResult {
	results := make([]core.NodeResult, len(sc.Nodes))
	var wg sync.WaitGroup
	for i, pos := range sc.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = a.scanNode(sc, pos)
		}()
	}
	wg.Wait()
	return results
}

// scanNode runs every page of one node's scan, through the client's link
// to the node; any failure makes the node unheard for this scan. A page
// that times out makes the node suspect (SuspectTimeout) until it answers
// again. The flag is the reader's own, by ensemble position, not the
// link's health: the link is shared with producers and other readers, and
// only this reader's own scans decide how long it waits for the node.
func (a *readerActor) scanNode(sc core.Scan, pos int) core.NodeResult {
	res := a.scanPages(sc, pos)
	if !res.Heard && a.cfg.Bugs.UnheardAsEmpty {
		return core.NodeResult{Node: pos, Heard: true, Closed: sc.To}
	}
	return res
}

// scanPages runs scanNode's pages.
func (a *readerActor) scanPages(sc core.Scan, pos int) core.NodeResult {
	node := a.topic.Ensembles[a.cfg.Partition][pos]
	subj := a.c.subjects.Scan(node, a.topic.Name, uint32(a.cfg.Partition))
	res := core.NodeResult{Node: pos}
	from := sc.From
	for {
		req := bus.ScanReq{Topic: a.topic.Name, Partition: uint32(a.cfg.Partition), From: from, To: sc.To, Close: true, Probe: sc.Probe}
		timeout := a.cfg.ScanTimeout
		if a.suspect[pos].Load() {
			timeout = a.cfg.SuspectTimeout
		}
		data, err := a.c.Request(context.Background(), node, subj, req.Marshal(), timeout)
		if err != nil {
			if errors.Is(err, ErrLinkTimeout) {
				a.suspect[pos].Store(true)
			} else if !errors.Is(err, ErrNoResponders) {
				a.log.Debug("scan failed", "node", node, "err", err)
			}
			return res
		}
		a.suspect[pos].Store(false)
		rep, err := bus.DecodeScanReply(data)
		if err != nil || !closingPageOK(rep, from, sc.To) {
			return res
		}
		for _, e := range rep.Entries {
			res.Entries = append(res.Entries, core.Entry{Offset: e.Offset, Shard: e.Shard})
		}
		res.After, res.Clock, res.Closed = rep.After, rep.NodeClock, rep.Seal
		if rep.Next == rep.Seal { // the last page: everything the node closed
			res.Heard = true
			return res
		}
		from = rep.Next
	}
}

// closingPageOK checks one page of a closing scan asked from `from` up to
// `to`: status OK, the closed offset (Seal) within [from, to], and the
// page ending at it or, when full, past from (so paging progresses).
func closingPageOK(rep bus.ScanReply, from, to uint64) bool {
	if rep.Status != bus.StatusOK || rep.Seal < from || rep.Seal > to || rep.Next > rep.Seal || rep.Next < from {
		return false
	}
	return rep.Next == rep.Seal || rep.Next > from
}
