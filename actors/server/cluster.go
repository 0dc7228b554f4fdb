package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/fanout"
	"github.com/raidq/raidq/actors/node"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe/quorum"
)

// LocalClusterConfig configures an in-process cluster: one embedded NATS
// server and n storage nodes, each with its own LevelDB under Dir.
type LocalClusterConfig struct {
	Dir     string // data directory (required); node i uses Dir/node-i
	Nodes   int    // default 6
	Cluster string // default "local"
	// Listen is the NATS client address ("127.0.0.1:4222"); empty means
	// in-process only (no port opened).
	Listen string
	// HTTPListen serves the NATS server's monitoring endpoints (/varz,
	// /jsz, /connz, ...) on host:port without authentication; "" none.
	HTTPListen string
	NoSync     bool // --no-fsync: acknowledged writes may be lost on power failure
	// Metrics receives every node's metrics (const label node=<id>) and
	// those of the clients Connect returns; nil = no metrics. Serve it
	// with metrics.ServeMetrics (package actors/metrics).
	Metrics *prometheus.Registry
	Logger  *slog.Logger
	// SlowNodes answer every request SlowDelay late.
	SlowNodes []int
	SlowDelay time.Duration
	// Repair tunes every node's repair, scrub and retention loops (zero
	// value: the defaults; node.RepairConfig).
	Repair node.RepairConfig
	// Auth turns on authentication and subject permissions on the NATS
	// server (the users of an auth file, natsserver.LoadAuthFile); the nodes and
	// Connect's clients use an in-process node identity. nil: no
	// authentication. TLS makes the client port require TLS (raidq dev
	// --tls). See docs/security.md.
	Auth *natsserver.AuthConfig
	TLS  *natsserver.TLSFiles
	// Kafka, when set, runs one Kafka gateway for the cluster (raidq dev
	// --kafka-listen; docs/kafka.md); its ID defaults to "dev".
	Kafka *KafkaOptions
}

// LocalCluster is an in-process raidq cluster (demo, dev, tests).
type LocalCluster struct {
	cfg     LocalClusterConfig
	server  *natsserver.Server
	catalog *meta.StaticCatalog
	mu      sync.Mutex
	nodes   []*localNode

	// The metadata store, its connection, the watched catalog
	// (whose StaticCatalog is catalog) and the heartbeat.
	meta     *meta.Store
	metaNC   *nats.Conn
	watched  *meta.WatchedCatalog
	hbCancel context.CancelFunc
	hbDone   chan struct{}
	kafka    *Gateway
}

type localNode struct {
	id    string
	dir   string
	nc    *nats.Conn
	store slotstore.Store
	node  *node.Node
	slow  time.Duration
	// The node's fan-out and the client its readers use.
	client *actors.Client
	fan    *fanout.Manager
	// member is the node's member record while it runs (nil when stopped);
	// the metadata heartbeat refreshes it.
	member atomic.Pointer[meta.Member]
}

// StartLocalCluster starts the server and every node.
func StartLocalCluster(cfg LocalClusterConfig) (*LocalCluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("local cluster: Dir is required")
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 6
	}
	if cfg.Nodes < 2 || cfg.Nodes > 64 {
		return nil, fmt.Errorf("local cluster: %d nodes, want 2..64", cfg.Nodes)
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "local"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	so := natsserver.ServerOptions{Name: "raidq-" + cfg.Cluster, InProcessOnly: cfg.Listen == "", Logger: nil}
	so.JetStream, so.StoreDir = true, filepath.Join(cfg.Dir, "nats")
	so.MaxMemory, so.MaxStore = DefaultNodeJSMaxMemory, DefaultNodeJSMaxStore
	if cfg.Listen != "" {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			return nil, err
		}
		so.Host, so.Port = host, port
	}
	var err error
	if so.HTTPHost, so.HTTPPort, err = natsserver.SplitMonitorListen(cfg.HTTPListen); err != nil {
		return nil, fmt.Errorf("local cluster: monitoring address: %w", err)
	}
	if cfg.Auth != nil || cfg.TLS != nil { // security.go
		sec, err := natsserver.NewSecurity(cfg.Cluster, cfg.Auth, cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("local cluster: %w", err)
		}
		so.Security = sec
	}
	srv, err := natsserver.StartServer(so)
	if err != nil {
		return nil, fmt.Errorf("local cluster: start NATS: %w", err)
	}
	lc := &LocalCluster{cfg: cfg, server: srv}
	if err := lc.openMeta(); err != nil {
		_ = lc.Close()
		return nil, err
	}
	for i := 0; i < cfg.Nodes; i++ {
		ln := &localNode{id: fmt.Sprintf("n%d", i), dir: filepath.Join(cfg.Dir, fmt.Sprintf("node-%d", i))}
		for _, s := range cfg.SlowNodes {
			if s == i {
				ln.slow = cfg.SlowDelay
			}
		}
		lc.nodes = append(lc.nodes, ln)
		if err := lc.startNode(ln); err != nil {
			_ = lc.Close()
			return nil, err
		}
	}
	lc.startHeartbeat()
	if err := lc.startKafka(); err != nil {
		_ = lc.Close()
		return nil, err
	}
	return lc, nil
}

// startKafka starts the cluster's Kafka gateway (LocalClusterConfig.Kafka).
func (lc *LocalCluster) startKafka() error {
	ko := lc.cfg.Kafka
	if ko == nil {
		return nil
	}
	if ko.ID == "" {
		ko.ID = "dev"
	}
	if ko.Metrics == nil {
		ko.Metrics = lc.cfg.Metrics
	}
	c, err := lc.Connect(raidq.WithName("raidq-kafka-" + ko.ID))
	if err != nil {
		return fmt.Errorf("local cluster: kafka gateway: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := StartGateway(ctx, c, lc.meta, lc.cfg.Cluster, *ko, lc.cfg.Logger)
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("local cluster: %w", err)
	}
	gw.own = true
	lc.kafka = gw
	return nil
}

// Kafka is the cluster's Kafka gateway (nil without LocalClusterConfig.Kafka).
func (lc *LocalCluster) Kafka() *Gateway { return lc.kafka }

func (lc *LocalCluster) startNode(ln *localNode) error {
	log := lc.cfg.Logger.With("node", ln.id)
	st, err := slotstore.Open(ln.dir, slotstore.Options{NoSync: lc.cfg.NoSync, Logger: log})
	if err != nil {
		return fmt.Errorf("node %s: %w", ln.id, err)
	}
	nc, err := lc.server.Connect("raidq-node-" + ln.id)
	if err != nil {
		_ = st.Close()
		return fmt.Errorf("node %s: connect: %w", ln.id, err)
	}
	n, err := node.Start(node.Config{ID: ln.id, Cluster: lc.cfg.Cluster, Store: st, Conn: nc,
		Catalog: lc.catalog, Logger: lc.cfg.Logger, ReplyDelay: ln.slow, Metrics: lc.cfg.Metrics, NoSync: lc.cfg.NoSync,
		Repair: lc.cfg.Repair, Disk: func() (node.DiskUsage, error) { return diskUsage(ln.dir) }, JetStream: lc.jetStream})
	if err != nil {
		nc.Close()
		_ = st.Close()
		return err
	}
	ln.store, ln.nc, ln.node = st, nc, n
	if err := lc.startFanout(ln); err != nil {
		lc.stopNode(ln, func() { n.Kill() })
		return err
	}
	ln.member.Store(&meta.Member{ID: ln.id, ClientURL: lc.ClientURL(), Started: time.Now().UnixNano(),
		Incarnation: st.Incarnation().String()})
	return nil
}

// jetStream says why the cluster's one NATS server has JetStream off ("":
// it runs): every node reports it (node_health.go).
func (lc *LocalCluster) jetStream() string {
	if lc.server == nil || lc.server.NATS().JetStreamEnabled() {
		return ""
	}
	return "turned off by the NATS server (its disk or resources ran out); restart raidq dev once there is space"
}

// startFanout runs the node's NATS fan-out (its leases live in the KV
// buckets).
func (lc *LocalCluster) startFanout(ln *localNode) error {
	c, err := actors.NewClient(actors.ClientConfig{Cluster: lc.cfg.Cluster, Conn: ln.nc, Catalog: lc.catalog, Logger: lc.cfg.Logger})
	if err != nil {
		return err
	}
	f, err := fanout.Start(fanout.Config{NodeID: ln.id, Cluster: lc.cfg.Cluster, Conn: ln.nc, Meta: lc.meta,
		Catalog: lc.catalog, Readers: fanout.ClientReaders(c), Logger: lc.cfg.Logger.With("node", ln.id), Interest: lc.server.Interest})
	if err != nil {
		c.Close()
		return fmt.Errorf("node %s: fan-out: %w", ln.id, err)
	}
	ln.client, ln.fan = c, f
	return nil
}

// stopNode stops a node's parts: fan-out, its client, the node (with
// stop), its connection and store.
func (lc *LocalCluster) stopNode(ln *localNode, stop func()) {
	if ln.fan != nil {
		ln.fan.Stop()
		ln.fan = nil
	}
	if ln.client != nil {
		ln.client.Close()
		ln.client = nil
	}
	stop()
	ln.nc.Close()
	_ = ln.store.Close()
	ln.node = nil
}

// NodeIDs lists the node ids in order.
func (lc *LocalCluster) NodeIDs() []string {
	ids := make([]string, len(lc.nodes))
	for i, n := range lc.nodes {
		ids[i] = n.id
	}
	return ids
}

// Catalog is the cluster's topic catalog (shared by nodes and clients).
func (lc *LocalCluster) Catalog() *meta.StaticCatalog { return lc.catalog }

// ClientURL is the NATS URL clients use (empty when in-process only).
func (lc *LocalCluster) ClientURL() string {
	if lc.cfg.Listen == "" {
		return ""
	}
	return lc.server.ClientURL()
}

// CreateTopic creates a topic whose ensembles are drawn from the running
// nodes' member records, as `raidq topic create` does.
func (lc *LocalCluster) CreateTopic(name string, partitions int, p quorum.Params) error {
	if err := bus.ValidName("topic", name); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := lc.meta.CreateTopic(ctx, meta.TopicSpec{Name: name, Partitions: partitions, Params: p}, time.Now())
	if err != nil {
		return err
	}
	return lc.catalog.Put(r.Topic()) // the watcher puts the same record; nodes need not wait for it
}

// Connect returns a client of the cluster, connected in process (as the
// internal node identity when the cluster has users), that learns topics
// from the metadata like any other client. opts come after the cluster's
// own (cluster name, logger, metrics) and may override them.
func (lc *LocalCluster) Connect(opts ...raidq.Option) (*raidq.Client, error) {
	url, nopts := lc.server.ClientOptions("raidq-client")
	base := []raidq.Option{raidq.WithNATSOptions(nopts...), raidq.WithCluster(lc.cfg.Cluster),
		raidq.WithLogger(lc.cfg.Logger), raidq.WithDirectNodes(false)}
	if lc.cfg.Metrics != nil {
		base = append(base, raidq.WithMetrics(lc.cfg.Metrics))
	}
	return raidq.Connect(url, append(base, opts...)...)
}

// KillNode stops node i abruptly (it stops answering at once; what it
// synced stays on disk).
func (lc *LocalCluster) KillNode(i int) error {
	ln, err := lc.node(i)
	if err != nil || ln.node == nil {
		return err
	}
	ln.member.Store(nil)
	node := ln.node
	lc.stopNode(ln, node.Kill)
	return nil
}

// RestartNode starts a stopped node again on its data directory.
func (lc *LocalCluster) RestartNode(i int) error {
	ln, err := lc.node(i)
	if err != nil {
		return err
	}
	if ln.node != nil {
		return fmt.Errorf("node %s is running", ln.id)
	}
	return lc.startNode(ln)
}

func (lc *LocalCluster) node(i int) (*localNode, error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if i < 0 || i >= len(lc.nodes) {
		return nil, fmt.Errorf("no node %d (cluster has %d)", i, len(lc.nodes))
	}
	return lc.nodes[i], nil
}

// NodeStats returns node i's counters (nil if stopped).
func (lc *LocalCluster) NodeStats(i int) *node.Stats {
	ln, err := lc.node(i)
	if err != nil || ln.node == nil {
		return nil
	}
	return ln.node.Stats()
}

// DiskBytes sums the size of every node's data directory.
//
// A running node's slot store is counted by its own DiskBytes, which
// leaves out the zeros of its preallocated journals (slotstore/prealloc.go:
// up to about 20 MiB per node while it runs, none once it stops).
func (lc *LocalCluster) DiskBytes() int64 {
	lc.mu.Lock()
	open := make(map[string]slotstore.Store)
	for _, ln := range lc.nodes {
		if ln.node != nil {
			open[filepath.Clean(ln.dir)] = ln.store
		}
	}
	lc.mu.Unlock()
	var total int64
	_ = filepath.WalkDir(lc.cfg.Dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil // files come and go: count what is there
		case d.IsDir():
			if st, ok := open[filepath.Clean(path)]; ok {
				total += st.DiskBytes()
				return filepath.SkipDir
			}
		default:
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// Close stops every node gracefully and the server; it returns the
// nodes' stop errors. Close is idempotent.
func (lc *LocalCluster) Close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if lc.kafka != nil {
		errs = append(errs, lc.kafka.Close())
		lc.kafka = nil
	}
	if lc.hbCancel != nil {
		lc.hbCancel()
		<-lc.hbDone
		lc.hbCancel = nil
	}
	for _, ln := range lc.nodes {
		ln.member.Store(nil)
		if ln.node != nil {
			node := ln.node
			lc.stopNode(ln, func() {
				if err := node.Stop(ctx); err != nil {
					errs = append(errs, fmt.Errorf("node %s: %w", ln.id, err))
				}
			})
		}
	}
	if lc.watched != nil {
		lc.watched.Close()
		lc.watched = nil
	}
	if lc.metaNC != nil {
		lc.metaNC.Close()
		lc.metaNC = nil
	}
	lc.server.Shutdown()
	return errors.Join(errs...)
}

// Meta is the cluster's metadata store.
func (lc *LocalCluster) Meta() *meta.Store { return lc.meta }

// openMeta creates the metadata buckets (one replica) and watches the
// catalog that the nodes then share.
func (lc *LocalCluster) openMeta() error {
	nc, err := lc.server.Connect("raidq-meta")
	if err != nil {
		return fmt.Errorf("local cluster: metadata connection: %w", err)
	}
	lc.metaNC = nc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc.meta, err = meta.Open(ctx, nc, lc.cfg.Cluster, meta.Options{Create: true, Replicas: 1, Logger: lc.cfg.Logger})
	if err != nil {
		return fmt.Errorf("local cluster: metadata: %w", err)
	}
	lc.watched, err = lc.meta.WatchCatalog(ctx)
	if err != nil {
		return fmt.Errorf("local cluster: watch the catalog: %w", err)
	}
	lc.catalog = lc.watched.StaticCatalog
	return nil
}

// startHeartbeat writes every running node's member record now and then
// every DefaultHeartbeat, logging failures at most once per 30s.
func (lc *LocalCluster) startHeartbeat() {
	beat := func(ctx context.Context) error {
		var errs []error
		for _, ln := range lc.nodes {
			if m := ln.member.Load(); m != nil {
				rec := *m
				rec.Heartbeat = time.Now().UnixNano()
				if err := lc.meta.PutMember(ctx, rec); err != nil {
					errs = append(errs, fmt.Errorf("member %s: %w", rec.ID, err))
				}
			}
		}
		return errors.Join(errs...)
	}
	if err := beat(context.Background()); err != nil {
		lc.cfg.Logger.Warn("local cluster: member records not written; the heartbeat keeps trying", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lc.hbCancel, lc.hbDone = cancel, make(chan struct{})
	go func() {
		defer close(lc.hbDone)
		t := time.NewTicker(DefaultHeartbeat)
		defer t.Stop()
		var lastWarn time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := beat(ctx); err != nil && ctx.Err() == nil && time.Since(lastWarn) >= heartbeatWarnEvery {
				lastWarn = time.Now()
				lc.cfg.Logger.Warn("local cluster: heartbeat failed; nodes serve from the cached catalog", "err", err)
			}
		}
	}()
}

// NATSServer is the cluster's embedded NATS server (tests check its
// Security().InternalViolations()).
func (lc *LocalCluster) NATSServer() *natsserver.Server { return lc.server }
