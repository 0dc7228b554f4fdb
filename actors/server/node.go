package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/fanout"
	"github.com/raidq/raidq/actors/node"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/slotstore"
)

// ErrAuthNotImplemented is returned by StartNode when the node would
// listen without authentication and NodeOptions.Insecure is not set:
// running without authentication must be an explicit choice. (The name is
// historical; ErrNoAuth is the same error.)
var ErrAuthNotImplemented = errors.New("no authentication configured: pass --auth FILE (users and their permissions, " +
	"docs/security.md) or --insecure to run a node without authentication (anyone who can reach its NATS ports " +
	"can read and write every topic)")

// ErrNoAuth is ErrAuthNotImplemented.
var ErrNoAuth = ErrAuthNotImplemented

// Defaults of NodeOptions.
const (
	DefaultCluster            = "raidq"
	DefaultNodeListen         = "127.0.0.1:4222"
	DefaultMetaTimeout        = 60 * time.Second
	DefaultHeartbeat          = 2 * time.Second
	DefaultNodeJSMaxMemory    = 64 << 20 // JetStream holds only raidq's metadata buckets
	DefaultNodeJSMaxStore     = 1 << 30
	MaxMetaReplicas           = 5 // metadata survives two of six servers down
	heartbeatWarnEvery        = 30 * time.Second
	metaProgressEvery         = 5 * time.Second
	metaAttemptTimeout        = 5 * time.Second
	nodeSlotsDir, nodeJSDir   = "slots", "nats"
	embeddedConnName          = "raidq-node-"
	defaultNodeConnectTimeout = 5 * time.Second
)

// Node is one running storage node (see StartNode).
type Node struct {
	opts    NodeOptions
	log     *slog.Logger
	store   slotstore.Store
	server  *natsserver.Server // nil when joined to an existing NATS system
	nc      *nats.Conn
	meta    *meta.Store
	catalog *meta.WatchedCatalog
	node    *node.Node
	client  *actors.Client  // the node's own client: fan-out readers
	fanout  *fanout.Manager // publishes decoded records on deliver subjects
	kafka   *Gateway        // the Kafka gateway (NodeOptions.Kafka), or nil
	started int64

	clockFault    *clockFault        // NodeOptions.ClockFault, or nil (clock_fault.go)
	clockFaultSub *nats.Subscription // its requests

	hbCancel   context.CancelFunc
	hbDone     chan struct{}
	healthDone chan struct{} // watchHealth ended (node_health.go)
	fatal      chan error

	stopOnce sync.Once
	stopErr  error
}

// StartNode assembles one production node: it opens the slot store, starts
// the embedded NATS server (JetStream on, clustered when ClusterListen is
// set) or connects to NATSURL, opens the metadata buckets (creating them
// with min(5, servers) replicas, waiting up to MetaTimeout for JetStream),
// watches the topic catalog, starts the node's actors and refreshes its
// member record every Heartbeat. Errors name what failed; a damaged data
// directory is an error wrapping slotstore.ErrCorrupt.
func StartNode(o NodeOptions) (*Node, error) { return StartNodeContext(context.Background(), o) }

// StartNodeContext is StartNode that gives up when ctx ends (a signal
// during the wait for JetStream).
func StartNodeContext(ctx context.Context, o NodeOptions) (n *Node, err error) {
	if err := o.check(); err != nil {
		return nil, badOptions{err}
	}
	log := o.Logger.With("node", o.ID)
	var fault *clockFault
	if o.ClockFault { // from here on everything reads the node's clock through o.Now
		fault = &clockFault{base: o.Now}
		o.Now = fault.now
	}
	n = &Node{opts: o, log: log, started: o.Now(), fatal: make(chan error, 1), clockFault: fault}
	partial := n // n is nil on the error returns
	defer func() {
		if err != nil {
			_ = partial.shutdown(context.Background())
		}
	}()

	if err := n.openStore(); err != nil {
		return nil, err
	}
	servers, err := n.connect()
	if err != nil {
		return nil, err
	}
	if fault != nil {
		if err := n.serveClockFault(); err != nil { // clock_fault.go
			return nil, err
		}
	}

	replicas := o.MetaReplicas
	if replicas == 0 {
		replicas = min(MaxMetaReplicas, servers)
	}
	if err := n.openMeta(ctx, replicas, servers); err != nil {
		return nil, err
	}

	if err := n.settleBirth(ctx); err != nil {
		return nil, err
	}
	if o.Replace != "" {
		if err := n.replace(ctx); err != nil {
			return nil, err
		}
	}

	n.node, err = node.Start(node.Config{ID: o.ID, Cluster: o.Cluster, Store: n.store, Conn: n.nc,
		Catalog: n.catalog, Logger: o.Logger, Now: o.Now, OnFatal: n.onFatal, Metrics: o.Metrics, NoSync: o.NoSync,
		ReplyDelay: o.ReplyDelay, Repair: o.Repair, ClockBound: o.ClockBound, ClockCheckEvery: n.clockCheckEvery(),
		Disk: n.diskPort, DiskWatermark: o.DiskWatermark, JetStream: n.jetStreamPort}) // node_health.go
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", o.ID, err)
	}

	if err := n.startFanout(); err != nil {
		return nil, err
	}

	n.startHeartbeat(ctx)
	if err := n.startKafka(ctx); err != nil {
		return nil, err
	}
	log.Info("node ready", "client_url", n.ClientURL(), "cluster", o.Cluster, "metadata_replicas", replicas,
		"fsync", !o.NoSync, "topics", len(n.catalog.Names()))
	return n, nil
}

// openStore opens the slot store in the data directory, saying plainly
// when it is damaged or held by another process.
func (n *Node) openStore() error {
	o := n.opts
	slots := filepath.Join(o.DataDir, nodeSlotsDir)
	var err error
	n.store, err = slotstore.Open(slots, slotstore.Options{NoSync: o.NoSync, Logger: n.log})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, slotstore.ErrCorrupt):
		return fmt.Errorf("node %s: the data directory %s is damaged; refusing to start: %w", o.ID, slots, err)
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK):
		return fmt.Errorf("node %s: the data directory %s is locked: is another node running on it? (%w)", o.ID, slots, err)
	}
	return fmt.Errorf("node %s: open the slot store in %s: %w", o.ID, slots, err)
}

// connect starts the embedded NATS server, or joins the NATS system at
// NATSURL, and returns how many servers the metadata can count on.
func (n *Node) connect() (servers int, err error) {
	o := n.opts
	if o.NATSURL == "" {
		if err := n.startServer(); err != nil {
			return 0, err
		}
		return routeServers(o.ClusterListen, o.Routes), nil
	}
	nopts := append([]nats.Option{nats.Name(embeddedConnName + o.ID), nats.Timeout(defaultNodeConnectTimeout),
		nats.MaxReconnects(-1)}, n.connHandlers()...)
	nopts = append(nopts, o.NATSOptions...)
	n.nc, err = nats.Connect(o.NATSURL, nopts...)
	if err != nil {
		return 0, fmt.Errorf("node %s: connect to NATS at %s: %w", o.ID, o.NATSURL, err)
	}
	return knownServers(n.nc), nil
}

// startHeartbeat writes the first member record (a failure is logged:
// the heartbeat keeps trying) and starts refreshing it every Heartbeat.
func (n *Node) startHeartbeat(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := n.meta.PutMember(pctx, n.member())
	cancel()
	if err != nil {
		n.log.Warn("first member record not written; the heartbeat keeps trying", "err", err)
	}
	hctx, hcancel := context.WithCancel(context.Background())
	n.hbCancel, n.hbDone, n.healthDone = hcancel, make(chan struct{}), make(chan struct{})
	go n.heartbeat(hctx)
	go n.watchHealth(hctx, n.healthDone)
}

// startFanout starts the node's fan-out: for the partitions it holds it
// competes for the lease and, holding it, publishes decoded records on
// raidq.<cluster>.deliver.<topic>.<partition> (docs/design.md#consumers-groups-and-fencing).
func (n *Node) startFanout() error {
	o := n.opts
	c, err := actors.NewClient(actors.ClientConfig{Cluster: o.Cluster, Conn: n.nc, Catalog: n.catalog, Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("node %s: fan-out client: %w", o.ID, err)
	}
	n.client = c
	fc := fanout.Config{NodeID: o.ID, Cluster: o.Cluster, Conn: n.nc, Meta: n.meta, Catalog: n.catalog, Readers: fanout.ClientReaders(c), Logger: o.Logger}
	if n.server != nil { // joined to another NATS system (--nats): no view of its interest, always publish
		fc.Interest = n.server.Interest
	}
	n.fanout, err = fanout.Start(fc)
	if err != nil {
		return fmt.Errorf("node %s: fan-out: %w", o.ID, err)
	}
	return nil
}

// knownServers counts the distinct servers a NATS connection knows of
// (the URLs given and those the cluster advertised).
func knownServers(nc *nats.Conn) int {
	seen := make(map[string]bool)
	for _, s := range nc.Servers() {
		if u, err := url.Parse(s); err == nil {
			seen[u.Host] = true
		}
	}
	return max(1, len(seen))
}

func (n *Node) startServer() error {
	o := n.opts
	host, port, _ := splitHostPort(o.Listen)
	so := natsserver.ServerOptions{Name: o.ID, Host: host, Port: port, JetStream: true,
		StoreDir: filepath.Join(o.DataDir, nodeJSDir), MaxMemory: o.JetStreamMaxMemory, MaxStore: o.JetStreamMaxStore,
		Logger: n.log}
	so.HTTPHost, so.HTTPPort, _ = natsserver.SplitMonitorListen(o.HTTPListen) // checked by checkListen
	sec, err := n.security()                                                  // node_security.go
	if err != nil {
		return err
	}
	so.Security = sec
	if o.ClusterListen != "" {
		ch, cp, _ := splitHostPort(o.ClusterListen)
		so.ClusterName, so.ClusterHost, so.ClusterPort, so.Routes = o.Cluster, ch, cp, o.Routes
		so.ClusterAdvertise = o.ClusterAdvertise
	}
	if o.ClientAdvertise != "" {
		so.ClientAdvertise = o.ClientAdvertise
	}
	srv, err := natsserver.StartServer(so)
	if err != nil {
		return fmt.Errorf("node %s: start the NATS server (listen %s): %w", o.ID, o.Listen, err)
	}
	n.server = srv
	if u := srv.MonitorURL(); u != "" {
		n.log.Info("NATS monitoring endpoints (no authentication)", "url", u)
	}
	opts := append([]nats.Option{nats.InProcessServer(srv.NATS()), nats.MaxReconnects(-1)}, n.connHandlers()...)
	n.nc, err = srv.Connect(embeddedConnName+o.ID, opts...)
	if err != nil {
		return fmt.Errorf("node %s: %w", o.ID, err)
	}
	return nil
}

func (n *Node) connHandlers() []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				n.log.Warn("NATS connection lost", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { n.log.Info("NATS connection back", "url", nc.ConnectedUrlRedacted()) }),
	}
}

// openMeta opens the metadata buckets (creating them) and watches the
// catalog, logging progress while JetStream is not ready yet.
func (n *Node) openMeta(ctx context.Context, replicas, servers int) error {
	o := n.opts
	ctx, cancel := context.WithTimeout(ctx, o.MetaTimeout)
	defer cancel()
	start := time.Now()
	done := make(chan struct{})
	defer close(done)
	go n.logMetaProgress(done, start, replicas, servers)
	var err error
	if n.server != nil {
		// A JetStream API request sent before the meta leader is known is
		// not answered, so wait for the embedded server to be current.
		if err := n.waitJetStreamCurrent(ctx); err != nil {
			return fmt.Errorf("node %s: JetStream has no meta leader after %s: %w (are a majority of the servers "+
				"of the route list up?)", o.ID, time.Since(start).Round(time.Millisecond), err)
		}
	}
	for attempt := 1; ; attempt++ {
		// Each attempt gets its own deadline: requests sent while the
		// cluster settles (a new meta leader, interest not yet propagated
		// along the routes) can go unanswered, and one lost request would
		// otherwise wait out the whole of ctx. The API answers in
		// milliseconds once settled; later attempts wait longer in case it
		// is just slow.
		wait := metaAttemptTimeout
		if attempt <= 8 {
			wait = 750 * time.Millisecond
		}
		actx, acancel := context.WithTimeout(ctx, wait)
		n.meta, err = meta.Open(actx, n.nc, o.Cluster, meta.Options{Create: true, Replicas: replicas, Logger: n.log})
		acancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			break
		}
		n.log.Debug("metadata not ready yet", "attempt", attempt, "err", err)
	}
	if err != nil {
		return fmt.Errorf("node %s: metadata (JetStream KV, %d replicas) not available after %s: %w "+
			"(are enough servers of the route list up? --meta-replicas sets the replica count)",
			o.ID, replicas, time.Since(start).Round(time.Millisecond), err)
	}
	if err := n.watchCatalog(ctx); err != nil {
		return fmt.Errorf("node %s: watch the topic catalog (after %s): %w", o.ID, time.Since(start).Round(time.Millisecond), err)
	}
	n.log.Info("metadata ready", "replicas", replicas, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// watchCatalog starts the topic catalog's watch. Its first request can go
// unanswered while JetStream settles, like opening the buckets: each
// attempt has its own deadline, until ctx ends.
func (n *Node) watchCatalog(ctx context.Context) error {
	var err error
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, metaAttemptTimeout)
		n.catalog, err = n.meta.WatchCatalog(actx)
		acancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		n.log.Info("watching the topic catalog failed; retrying", "attempt", attempt, "err", err)
	}
}

// logMetaProgress logs, every metaProgressEvery until done closes, how
// long the node has waited for JetStream and how many servers it sees.
func (n *Node) logMetaProgress(done <-chan struct{}, start time.Time, replicas, servers int) {
	t := time.NewTicker(metaProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			args := []any{"waited", time.Since(start).Round(time.Second), "replicas", replicas, "servers_expected", servers}
			if n.server != nil {
				args = append(args, "routed_servers", n.server.NATS().NumRemotes())
			}
			n.log.Info("waiting for JetStream (meta leader and enough servers for the metadata replicas)", args...)
		}
	}
}

// waitJetStreamCurrent waits until the embedded server's JetStream knows
// its meta leader and is caught up with it.
func (n *Node) waitJetStreamCurrent(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !n.server.NATS().JetStreamIsCurrent() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// settleBirth gives a new incarnation (a new or wiped data directory) its
// birth from cluster time (node.SettleBirth): the peers' clocks, and the
// last heartbeat of this node's member record (its old incarnation's clock)
// and of the node it replaces, one heartbeat period on.
func (n *Node) settleBirth(ctx context.Context) error {
	o := n.opts
	if !n.store.Incarnation().Provisional {
		return nil
	}
	var clocks []int64
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	members, err := n.meta.Members(mctx)
	cancel()
	if err != nil {
		n.log.Warn("member records not read; the new incarnation's birth comes from the peers' clocks", "err", err)
	}
	for _, m := range members {
		if m.ID == o.ID || (o.Replace != "" && m.ID == o.Replace) {
			clocks = append(clocks, m.Heartbeat+o.Heartbeat.Nanoseconds())
		}
	}
	_, err = node.SettleBirth(ctx, node.BirthConfig{ID: o.ID, Cluster: o.Cluster, Store: n.store, Conn: n.nc,
		Catalog: n.catalog, Now: o.Now, Clocks: clocks, Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("node %s: %w", o.ID, err)
	}
	return nil
}

// replace takes over o.Replace's ensemble positions (NodeOptions.Replace)
// and waits until the catalog shows the change, so the node's actors start
// with the new ensembles.
func (n *Node) replace(ctx context.Context) error {
	o := n.opts
	ctx, cancel := context.WithTimeout(ctx, o.MetaTimeout)
	defer cancel()
	var changed int
	var err error
	for attempt := 1; ; attempt++ {
		// Right after the old node died the metadata streams it led are
		// electing new leaders: retry what is not a refusal.
		changed, err = n.meta.ReplaceNode(ctx, o.Replace, o.ID, n.store.Incarnation().Birth, time.Unix(0, o.Now()))
		if err == nil || errors.Is(err, meta.ErrReplace) || ctx.Err() != nil {
			break
		}
		n.log.Info("--replace: metadata not available yet; retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("node %s: --replace %s: %w", o.ID, o.Replace, err)
	}
	if changed == 0 {
		n.log.Info("--replace: no ensemble holds the old node (already replaced?)", "old", o.Replace)
		return nil
	}
	n.log.Warn("--replace: took over the old node's ensemble positions; repair refills them", "old", o.Replace, "partitions", changed)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for n.catalogHolds(o.Replace) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: --replace %s: the catalog did not show the change: %w", o.ID, o.Replace, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// catalogHolds reports whether any topic of the watched catalog still has
// id in an ensemble.
func (n *Node) catalogHolds(id string) bool {
	for _, name := range n.catalog.Names() {
		t, err := n.catalog.Topic(name)
		if err != nil {
			continue
		}
		for _, e := range t.Ensembles {
			if slices.Contains(e, id) {
				return true
			}
		}
	}
	return false
}

func (n *Node) member() meta.Member {
	inc := n.store.Incarnation()
	return meta.Member{ID: n.opts.ID, ClientURL: n.ClientURL(), Started: n.started, Heartbeat: n.opts.Now(),
		Incarnation: inc.String()}
}

// heartbeat refreshes the member record. While the metadata is
// unavailable the node keeps serving from its cached catalog and logs at
// most once per heartbeatWarnEvery.
func (n *Node) heartbeat(ctx context.Context) {
	defer close(n.hbDone)
	t := time.NewTicker(n.opts.Heartbeat)
	defer t.Stop()
	var failing int
	var lastWarn time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := n.meta.PutMember(ctx, n.member())
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failing++
			if time.Since(lastWarn) >= heartbeatWarnEvery {
				lastWarn = time.Now()
				n.log.Warn("heartbeat: metadata unavailable; serving from the cached catalog", "failures", failing, "err", err)
			}
		case failing > 0:
			n.log.Info("heartbeat: metadata available again", "failures", failing)
			failing, lastWarn = 0, time.Time{}
		}
	}
}

func (n *Node) onFatal(err error) {
	select {
	case n.fatal <- err:
	default:
	}
}

// ID is the node id.
func (n *Node) ID() string { return n.opts.ID }

// Kafka is the node's Kafka gateway (nil without NodeOptions.Kafka).
func (n *Node) Kafka() *Gateway { return n.kafka }

// ClientURL is the NATS URL clients use to reach this node's NATS system.
func (n *Node) ClientURL() string {
	if n.server != nil {
		return n.server.ClientURL()
	}
	if n.nc != nil {
		return n.nc.ConnectedUrlRedacted()
	}
	return ""
}

// RouteURL is the embedded server's route URL ("" when not clustered or
// not embedded).
func (n *Node) RouteURL() string {
	if n.server == nil {
		return ""
	}
	return n.server.ClusterURL()
}

// Meta is the node's metadata store.
func (n *Node) Meta() *meta.Store { return n.meta }

// Catalog is the node's watched topic catalog.
func (n *Node) Catalog() *meta.WatchedCatalog { return n.catalog }

// Stats are the node's counters.
func (n *Node) Stats() *node.Stats { return n.node.Stats() }

// Fatal receives the error when the node's store fails (fsync error,
// corrupt data): the node must then be stopped, loudly.
func (n *Node) Fatal() <-chan error { return n.fatal }

// Close is Stop bounded by 30 s.
func (n *Node) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Stop(ctx)
}

// Stop leaves gracefully: stop the heartbeat, stop taking requests, let
// in-flight writes reach the store and fsync, close the store, leave NATS
// (shut the embedded server down). It is idempotent: later calls return
// the first call's result.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.stopErr = n.shutdown(ctx)
		if n.stopErr != nil {
			n.log.Error("node stopped with errors", "err", n.stopErr)
		} else {
			n.log.Info("node left")
		}
	})
	return n.stopErr
}

// shutdown releases whatever is set up, in reverse order.
func (n *Node) shutdown(ctx context.Context) error {
	var errs []error
	var slow []any // steps that took long, for the log
	step := func(name string, f func() error) {
		t := time.Now()
		if err := f(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		if d := time.Since(t); d > time.Second {
			slow = append(slow, name, d.Round(time.Millisecond))
		}
	}
	if n.clockFaultSub != nil {
		step("stop clock fault", n.clockFaultSub.Unsubscribe)
	}
	if n.kafka != nil {
		step("stop kafka gateway", n.kafka.Close)
	}
	if n.hbCancel != nil {
		step("stop heartbeat", func() error { n.hbCancel(); <-n.hbDone; <-n.healthDone; return nil })
	}
	if n.fanout != nil {
		step("stop fan-out", func() error { n.fanout.Stop(); return nil })
	}
	if n.client != nil {
		step("stop node client", func() error { n.client.Close(); return nil })
	}
	if n.node != nil {
		step("stop node", func() error { return n.node.Stop(ctx) })
	}
	if n.store != nil {
		step("close slot store", n.store.Close)
	}
	if n.nc != nil {
		step("close NATS connection", func() error {
			_ = n.nc.FlushTimeout(time.Second)
			n.nc.Close()
			return nil
		})
	}
	if n.catalog != nil {
		// After the connection: stopping the watch asks JetStream to delete
		// its consumer, which waits out a timeout when the cluster has lost
		// its quorum (the last servers of a cluster stopping).
		step("stop catalog watch", func() error { n.catalog.Close(); return nil })
	}
	if n.server != nil {
		step("shut the NATS server down", func() error { n.server.Shutdown(); return nil })
	}
	if len(slow) > 0 {
		n.log.Warn("slow stop", slow...)
	}
	return errors.Join(errs...)
}
