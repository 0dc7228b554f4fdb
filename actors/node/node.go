package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/internal/actorsys"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// Config configures one storage node.
type Config struct {
	ID      string
	Cluster string
	Store   slotstore.Store
	Conn    *nats.Conn // the node's NATS connection; the node does not close it
	Catalog meta.Catalog
	Logger  *slog.Logger // nil = slog.Default()
	// Now is the node clock in unix ns; nil = time.Now.
	Now func() int64
	// ReplyDelay makes the node answer late (demo and drills: a slow node).
	ReplyDelay time.Duration
	// MaxPending bounds requests inside the node; beyond it new requests
	// are answered BUSY at once (default 8192).
	MaxPending int
	// ScanWorkers bounds concurrent store scans (default 4).
	ScanWorkers int
	// OwnerIdle: a slot owner that has seen no request for between one
	// and two OwnerIdle, with no commit in flight, retires (default 5s;
	// tests shorten it).
	OwnerIdle time.Duration
	// OnFatal is called once when the store fails (fsync error, corrupt
	// data): the node must stop loudly, not limp on.
	OnFatal func(error)
	// Metrics receives the node's Prometheus metrics, each with the const
	// label node=<ID> (nil = no metrics). Stop and Kill unregister them.
	Metrics *prometheus.Registry
	// NoSync says the store was opened with --no-fsync; the node only
	// reports it (status endpoint).
	NoSync bool
	// Repair tunes the node's repair, scrub and retention loops
	// (actors/repair.go; zero value = defaults).
	Repair RepairConfig
	// ClockBound: a node whose clock is further than this from its peers'
	// (their median) refuses writes as CLOCK_OFF until it is back within
	// half of it (clock_watch.go; default 1s, negative: never checked).
	// ClockCheckEvery is how often it asks them (default 5s).
	ClockBound, ClockCheckEvery time.Duration
	// Client, if set, is the client the node reaches its peers through:
	// the requests of repair, the clock watch and birth go over its links
	// (actors.Client.Request), and repair re-appends in-doubt stripes
	// through it (actors.Client.Reappend, the producers' write path); its
	// clock (ClientConfig.Now) should be the node's, since it picks the
	// offsets. The node does not close it. nil: the node makes its own
	// from Cluster, Conn, Catalog, Logger and Now on the first request to
	// a peer and closes it when it stops (reappend.go).
	Client *actors.Client
	// Disk, if set, measures the file system of the node's data (status,
	// metrics); DiskWatermark is the fraction in use past which the node
	// reports disk pressure (default bus.DefaultDiskWatermark).
	Disk          func() (DiskUsage, error)
	DiskWatermark float64
	// JetStream, if set, says why the embedded NATS server's JetStream is
	// off ("" while it runs): reported in status and metrics.
	JetStream func() string
}

// Node is one storage node: an actor system (node → partition → slot
// owner) behind two NATS subscriptions, raidq.<cluster>.slot.<node>.> for
// writes and raidq.<cluster>.scan.<node>.> for scans (node_guard.go).
type Node struct {
	cfg      Config
	subjects bus.Subjects
	system   *actor.ActorSystem
	pool     *actorsys.Pool // the actors' goroutines (dispatch.go)
	root     *actor.PID
	parts    sync.Map           // partKey -> *actor.PID of a partition actor (node_actor.go)
	sub      *nats.Subscription // writes: raidq.<cluster>.slot.<node>.>
	scanSub  *nats.Subscription // scans: raidq.<cluster>.scan.<node>.> (node_guard.go)
	pending  atomic.Int64
	scans    chan struct{}
	scanWG   sync.WaitGroup // scans waiting for or holding a worker
	stats    Stats
	fatal    sync.Once
	stopOnce sync.Once
	replies  sync.WaitGroup // delayed replies still to send
	started  time.Time
	owners   atomic.Int64           // slot-owner actors alive
	failure  atomic.Pointer[string] // the store failure that stopped the node
	metrics  *metrics.Node          // nil: no metrics
	svc      micro.Service          // the raidq-node micro service (node_service.go)
	maint    *maintenance           // repair, scrub and retention state (repair.go)
	clock    clockState             // the node's clock against its peers' (clock_watch.go)
	peers    peerClient             // the client requests to peers and re-appends go through (reappend.go)
	floor    floorKeeper            // the clock floor of closing scans (clock_floor.go)
	accept   acceptViews            // each topic's accept window by range (accept_views.go)
	// storeErrs counts store errors since the last log line of them, and
	// storeErrLogged is when that line was written (unix ns; disk.go).
	storeErrs, storeErrLogged atomic.Int64
}

// Stats are a node's counters (read with atomic loads).
type Stats struct {
	Writes, Conflicts, Sealed, ClockAhead, BadRequests, Busy, Scans, StoreErrors atomic.Int64
	// Maintenance (repair.go, scrub.go, retention.go).
	ShardsRepaired, RepairFailures, StripesBelowN, RepairPasses, RepairPassNanos, Holes atomic.Int64
	// RepairPending: offset ranges the last repair pass could not finish
	// (a shard it could not rebuild or write, a peer it could not hear)
	// plus corrupt shards queued by scrub; with StripesBelowN 0 it means
	// full redundancy up to the repair horizon. InDoubtQueued: readers'
	// in-doubt reports waiting for their stripe to prove decodable
	// (re-append) or never committed.
	RepairPending, InDoubtQueued                                            atomic.Int64
	ReAppended, ScrubPasses, ScrubbedShards, ScrubCorrupt, RetentionDropped atomic.Int64
	// Refusals of hostile or broken input (node_guard.go), all also counted
	// in BadRequests: undecodable payloads, subject/payload/metadata
	// mismatches, and repair writes from the wire.
	Malformed, Mismatches, ForgedRepairs atomic.Int64
}

// Start starts the node's actors and subscribes to its subjects.
func Start(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 8192
	}
	if cfg.ScanWorkers <= 0 {
		cfg.ScanWorkers = 4
	}
	if cfg.OwnerIdle <= 0 {
		cfg.OwnerIdle = defaultOwnerIdle
	}
	if cfg.ClockBound == 0 {
		cfg.ClockBound = DefaultClockBound
	}
	if cfg.ClockCheckEvery <= 0 {
		cfg.ClockCheckEvery = DefaultClockCheckEvery
	}
	if cfg.DiskWatermark <= 0 || cfg.DiskWatermark >= 1 {
		cfg.DiskWatermark = bus.DefaultDiskWatermark
	}
	if err := bus.ValidName("node id", cfg.ID); err != nil {
		return nil, err
	}
	subj, err := bus.NewSubjects(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	// A new incarnation takes its birth from cluster time before the node
	// answers anything (birth.go); the caller may have settled it already.
	if _, err := SettleBirth(context.Background(), BirthConfig{ID: cfg.ID, Cluster: cfg.Cluster, Store: cfg.Store,
		Client: cfg.Client, Conn: cfg.Conn, Catalog: cfg.Catalog, Now: cfg.Now, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	n := &Node{cfg: cfg, subjects: subj, scans: make(chan struct{}, cfg.ScanWorkers), started: time.Now()}
	n.maint = newMaintenance(n)
	n.cfg.Logger = cfg.Logger.With("node", cfg.ID)
	if err := n.startFloor(); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	if err := n.startMetrics(); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	n.system = actorsys.NewSystem(n.cfg.Logger)
	n.pool = actorsys.NewPool(actorsys.Throughput)
	n.root = n.system.Root.Spawn(actorsys.Props(n.pool, func() actor.Actor { return newNodeActor(n) },
		actor.WithSupervisor(actorsys.RestartStrategy())))
	if err := n.subscribe(); err != nil { // node_guard.go: slot and scan subjects
		n.stopActors()
		n.metrics.Unregister()
		return nil, fmt.Errorf("node %s: subscribe: %w", cfg.ID, err)
	}
	if err := n.startService(); err != nil {
		n.unsubscribe()
		n.stopActors()
		n.metrics.Unregister()
		return nil, fmt.Errorf("node %s: micro service: %w", cfg.ID, err)
	}
	// Make sure the server has every subscription (slot, scan, status and
	// the micro service's discovery) before callers are told the node is
	// up; else the first requests find no responders.
	if err := cfg.Conn.Flush(); err != nil {
		n.stopService()
		n.unsubscribe()
		n.stopActors()
		n.metrics.Unregister()
		return nil, fmt.Errorf("node %s: flush subscriptions: %w", cfg.ID, err)
	}
	n.cfg.Logger.Info("node started", "subject", subj.SlotAll(cfg.ID), "incarnation", cfg.Store.Incarnation().String())
	return n, nil
}

// ID is the node id.
func (n *Node) ID() string { return n.cfg.ID }

// Stats returns the node's counters.
func (n *Node) Stats() *Stats { return &n.stats }

// Stop leaves gracefully: stop taking requests, let in-flight writes
// reach the store, stop the actors, and wait for delayed replies. The
// caller closes the store afterwards (Close fsyncs what is queued).
func (n *Node) Stop(ctx context.Context) error {
	var err error
	n.stopOnce.Do(func() {
		n.stopService()
		err = n.drainSubs(ctx) // node_guard.go
		n.drainActors(ctx)
		n.stopActors()
		n.peers.close() // after the actors: no repair or clock pass is left to use it
		n.settle(ctx)
		n.replies.Wait()
		n.metrics.Unregister()
		n.cfg.Logger.Info("node stopped")
	})
	return err
}

// Kill stops the node abruptly, as a crash would look to its peers: it
// stops answering at once. (Durable state is whatever the store synced.)
func (n *Node) Kill() {
	n.stopOnce.Do(func() {
		n.unsubscribe()
		// Until the server has the UNSUB, it still routes requests here,
		// where they vanish (the caller waits out its timeout instead of
		// getting no responders at once).
		_ = n.cfg.Conn.FlushTimeout(time.Second)
		n.stopService()
		n.stopActors()
		n.peers.close()
		n.replies.Wait()
		n.metrics.Unregister()
		n.cfg.Logger.Warn("node killed")
	})
}

func (n *Node) stopActors() {
	_ = n.system.Root.PoisonFuture(n.root).Wait()
	n.system.Shutdown()
	n.pool.Close()
}

// fail is called when the store failed; the node stops loudly.
func (n *Node) fail(err error) {
	n.fatal.Do(func() {
		msg := err.Error()
		n.failure.Store(&msg)
		n.cfg.Logger.Error("store failed: node must stop", "err", err)
		if n.cfg.OnFatal != nil {
			go n.cfg.OnFatal(err)
		}
	})
}

// respond sends a reply, late if the node is configured slow, and releases
// the request's pending slot.
func (n *Node) respond(m *nats.Msg, data []byte) { n.send(m, data, time.Time{}, 0) }

// send is respond that, for a write answered with status s, records the
// write's latency from start (its arrival; zero when metrics are off) as
// the reply goes out (before, so the count is there when the reply lands).
func (n *Node) send(m *nats.Msg, data []byte, start time.Time, s bus.Status) {
	if n.cfg.ReplyDelay <= 0 {
		n.observeWrite(start, s)
		n.pending.Add(-1)
		_ = m.Respond(data)
		return
	}
	n.replies.Add(1)
	time.AfterFunc(n.cfg.ReplyDelay, func() {
		defer n.replies.Done()
		n.observeWrite(start, s)
		n.pending.Add(-1)
		_ = m.Respond(data)
	})
}

// writeReply answers a write received at start.
func (n *Node) writeReply(m *nats.Msg, start time.Time, s bus.Status, detail string) {
	n.send(m, bus.WriteReply{Status: s, NodeClock: n.cfg.Now(), Detail: bus.TruncDetail(detail)}.Marshal(), start, s)
}

func (n *Node) scanError(m *nats.Msg, s bus.Status, detail string) {
	n.respond(m, bus.ScanReply{Status: s, NodeClock: n.cfg.Now(), Detail: bus.TruncDetail(detail),
		Birth: n.cfg.Store.Incarnation().Birth}.Marshal())
}

// errReply answers a request of either kind with an error status.
func (n *Node) errReply(m *nats.Msg, start time.Time, isScan bool, s bus.Status, detail string) {
	switch s {
	case bus.StatusBadRequest, bus.StatusWrongNode:
		n.stats.BadRequests.Add(1)
	case bus.StatusBusy:
		n.stats.Busy.Add(1)
	}
	if isScan {
		n.scanError(m, s, detail)
	} else {
		n.writeReply(m, start, s, detail)
	}
}

// handle runs on the subscription's goroutine: it validates the request
// (subject against payload against metadata, shard CRC) and hands it to
// the node actor. It never blocks on the store.
func (n *Node) handle(m *nats.Msg) {
	n.pending.Add(1)
	if m.Reply == "" {
		n.pending.Add(-1)
		return
	}
	var start time.Time
	if n.metrics != nil {
		start = time.Now()
	}
	req, err := bus.DecodeRequest(m.Data)
	if err != nil {
		n.stats.Malformed.Add(1)
		n.errReply(m, start, false, bus.StatusBadRequest, err.Error())
		return
	}
	r, status, detail := n.route(m, req)
	if status != 0 {
		_, isScan := req.(bus.ScanReq)
		n.errReply(m, start, isScan, status, detail)
		return
	}
	r.start = start
	if pid, ok := n.parts.Load(partKey{r.topic.Name, r.partition}); ok {
		sendToPartition(n.system.Root, pid.(*actor.PID), r)
		return
	}
	sendToRouter(n.system.Root, n.root, r)
}

// slotRequest is a validated request on its way to its owner.
type slotRequest struct {
	msg       *nats.Msg
	start     time.Time // arrival, for the write latency metric (zero: metrics off)
	topic     *meta.Topic
	partition uint32
	write     *bus.WriteReq
	shard     stripe.ShardHeader
	scan      *bus.ScanReq
	// repaired: a repair write from the node's own repair loop (never
	// from the wire), answered through this callback (repair_write.go).
	repaired func(bus.Status, string)
}

func (r *slotRequest) rangeStart() uint64 {
	if r.write != nil {
		return core.RangeStart(r.write.Offset)
	}
	return core.RangeStart(r.scan.From)
}

// route checks a decoded request and builds the slotRequest.
func (n *Node) route(m *nats.Msg, req any) (*slotRequest, bus.Status, string) {
	if int(n.pending.Load()) > n.cfg.MaxPending {
		return nil, bus.StatusBusy, "node overloaded"
	}
	scanSubject, node, topic, part, err := n.subjects.ParseRequest(m.Subject)
	if err != nil || node != n.cfg.ID {
		return n.mismatch(bus.StatusBadRequest, "bad subject %q", m.Subject)
	}
	r := &slotRequest{msg: m, partition: part}
	var ptopic string
	var ppart uint32
	switch q := req.(type) {
	case bus.WriteReq:
		r.write, ptopic, ppart = &q, q.Topic, q.Partition
	case bus.ScanReq:
		r.scan, ptopic, ppart = &q, q.Topic, q.Partition
	default:
		n.stats.Malformed.Add(1)
		return nil, bus.StatusBadRequest, "not a request"
	}
	if status, detail := n.checkKind(scanSubject, r); status != 0 { // node_guard.go
		return nil, status, detail
	}
	if ptopic != topic || ppart != part {
		return n.mismatch(bus.StatusBadRequest, "subject names %s/%d, payload %s/%d", topic, part, ptopic, ppart)
	}
	t, err := n.cfg.Catalog.Topic(topic)
	if err != nil {
		return n.mismatch(bus.StatusBadRequest, "%s", err.Error())
	}
	if int(part) >= t.Partitions {
		return n.mismatch(bus.StatusBadRequest, "topic %s has %d partitions, not %d", topic, t.Partitions, part+1)
	}
	pos := t.Position(part, n.cfg.ID)
	if pos < 0 {
		return n.mismatch(bus.StatusWrongNode, "node %s is not in the ensemble of %s/%d", n.cfg.ID, topic, part)
	}
	r.topic = t
	if r.write != nil && n.clock.off.Load() {
		return nil, bus.StatusClockOff, fmt.Sprintf("node %s clock is %s cluster time (bound %v): it takes no writes until corrected",
			n.cfg.ID, clockOffText(n.clock.offset.Load()), n.cfg.ClockBound)
	}
	if r.write != nil {
		s, err := stripe.Parse(r.write.Shard)
		if err != nil {
			n.stats.Malformed.Add(1)
			return nil, bus.StatusBadRequest, err.Error()
		}
		if int(s.Index) != pos || int(s.N) != t.Params.N || int(s.K) != t.Params.K {
			return n.mismatch(bus.StatusWrongNode, "shard %d of n=%d k=%d sent to ensemble position %d of n=%d k=%d",
				s.Index, s.N, s.K, pos, t.Params.N, t.Params.K)
		}
		r.shard = s.ShardHeader
		// Readers never read below the topic's creation, so a write there
		// (a producer whose clock runs behind, right after the topic was
		// created) must be refused, not stored and never read. SEALED makes
		// the producer retry at a fresh offset from its corrected clock.
		if r.write.Offset < t.Created {
			n.stats.Sealed.Add(1)
			return nil, bus.StatusSealed, fmt.Sprintf("offset %d is before topic %s was created (%d)", r.write.Offset, t.Name, t.Created)
		}
	}
	return r, 0, ""
}

var errStopped = errors.New("node stopped")
