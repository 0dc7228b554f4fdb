// Package kafka is raidq's Kafka protocol gateway: a listener that lets
// unchanged Kafka clients produce to and consume from raidq topics
// (docs/kafka.md). A gateway is a raidq client: it holds no data, every
// gateway advertises itself as the leader of every partition, and any of
// them can coordinate a consumer group because group state lives in the
// cluster metadata. Killing one costs its clients one bootstrap address.
//
// Connections are goroutines (one reader, one in-order writer, and one
// per request in flight, bounded), as in nats-server; the protocol work
// underneath runs on the raidq client's actors (producers, readers).
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/bus/meta"
)

// ErrConfig is wrapped by every configuration error of Start.
var ErrConfig = errors.New("kafka gateway: bad configuration")

// Config configures a gateway.
type Config struct {
	// Client is the raidq client the gateway produces and reads through
	// (not closed by the gateway).
	Client *raidq.Client
	// Meta is the cluster metadata (gateway records, Kafka groups).
	Meta *meta.Store
	// Cluster is the raidq cluster's name (Metadata's cluster id).
	Cluster string
	// Listen is the Kafka listener's host:port ("127.0.0.1:9092").
	Listen string
	// Advertise is the host:port given to clients (default: the listener's
	// address, with 127.0.0.1 for an unspecified host).
	Advertise string
	// ID names the gateway: stable across restarts and unique in the
	// cluster (a node's id, or `raidq kafka --id`).
	ID string
	// BrokerID is the Kafka broker id; < 0: derived from ID (FNV-32, 31 bits).
	BrokerID int32
	// TLS, when set, makes the listener speak TLS.
	TLS *tls.Config
	// Users authenticates Kafka clients (SASL PLAIN) and says what each may
	// do; nil: no authentication, every client may do everything.
	Users Authorizer
	// MaxRequestBytes bounds one request frame (default 100 MiB, Kafka's
	// socket.request.max.bytes).
	MaxRequestBytes int32
	// MaxConnections bounds open client connections (default 4096).
	MaxConnections int
	// ProduceTimeout bounds one batch's send (default 30 s); the client
	// retries after its own request timeout anyway.
	ProduceTimeout time.Duration
	// Logger receives the gateway's logs (default slog.Default()).
	Logger *slog.Logger
	// Metrics receives the gateway's metrics (raidq_kafka_*; nil: none).
	Metrics prometheus.Registerer
}

// Authorizer authenticates Kafka users and decides what they may do
// (actors/kafka/auth.go). Implementations must be safe for concurrent use.
type Authorizer interface {
	// Mechanisms lists the SASL mechanisms offered ("PLAIN", ...).
	Mechanisms() []string
	// Authenticate checks a PLAIN user and password.
	Authenticate(user, password string) error
	// Allowed says whether user may do op on topic ("" for cluster ops).
	Allowed(user string, op Op, topic string) bool
	// GroupAllowed says whether user may join or commit in group.
	GroupAllowed(user, group string) bool
}

// Op is what a client asks to do with a topic.
type Op int

// The operations checked per topic.
const (
	OpProduce Op = iota
	OpConsume
	OpDescribe
	OpAdmin // create, delete
)

func (c *Config) defaults() error {
	if c.Client == nil || c.Meta == nil {
		return fmt.Errorf("%w: a raidq client and the metadata store are required", ErrConfig)
	}
	if c.Cluster == "" {
		c.Cluster = "raidq"
	}
	if c.ID == "" {
		return fmt.Errorf("%w: a gateway id is required", ErrConfig)
	}
	if c.BrokerID < 0 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(c.ID))
		c.BrokerID = int32(h.Sum32() & 0x7fffffff)
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 100 << 20
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = 4096
	}
	if c.ProduceTimeout <= 0 {
		c.ProduceTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Gateway is a running Kafka listener.
type Gateway struct {
	cfg       Config
	log       *slog.Logger
	ln        net.Listener
	advertise string
	cat       *meta.WatchedCatalog
	reg       *registry
	groups    *Coordinator
	prods     *producers
	fetches   *sessions
	tails     *tails
	idem      *idempotence
	merge     *merger
	// auths bounds concurrent password checks (bcrypt costs ~50 ms of
	// CPU each): a flood of logins must not starve the data path.
	auths chan struct{}
	m     *metrics.Kafka // nil: no metrics

	mu    sync.Mutex
	conns map[*conn]struct{}
	quit  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// Start opens the listener and registers the gateway. It returns once
// clients can connect.
func Start(ctx context.Context, cfg Config) (*Gateway, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("kafka gateway: listen %s: %w", cfg.Listen, err)
	}
	adv, err := advertised(cfg.Advertise, ln.Addr())
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger.With("component", "kafka", "gateway", cfg.ID), ln: ln, advertise: adv,
		conns: make(map[*conn]struct{}), quit: make(chan struct{}), auths: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)/2))}
	if g.m, err = metrics.NewKafka(cfg.Metrics); err != nil {
		_ = ln.Close()
		return nil, err
	}
	if err := g.start(ctx); err != nil {
		_ = ln.Close()
		g.stopParts()
		return nil, err
	}
	g.wg.Add(1)
	go g.accept()
	g.log.Info("kafka gateway listening", "listen", ln.Addr().String(), "advertise", adv, "broker_id", cfg.BrokerID,
		"tls", cfg.TLS != nil, "sasl", cfg.Users != nil)
	return g, nil
}

func (g *Gateway) start(ctx context.Context) error {
	cat, err := g.cfg.Meta.WatchCatalog(ctx)
	if err != nil {
		return fmt.Errorf("kafka gateway: %w", err)
	}
	g.cat = cat
	g.reg, err = startRegistry(ctx, g.cfg.Meta, meta.Gateway{ID: g.cfg.ID, BrokerID: g.cfg.BrokerID, Advertise: g.advertise}, g.log)
	if err != nil {
		return err
	}
	g.groups, err = NewCoordinator(CoordinatorConfig{KV: g.cfg.Meta, IsCoordinator: g.reg.coordinates, Logger: g.log,
		ValidPartition: g.validPartition})
	if err != nil {
		return err
	}
	g.prods = newProducers(g.cfg.Client, g.cfg.ProduceTimeout)
	g.fetches = newSessions(g.cfg.Client, g.log, g.m)
	if g.tails, err = newTails(g.cfg.Client.Conn(), g.cfg.Cluster, g.log); err != nil {
		return fmt.Errorf("kafka gateway: %w", err)
	}
	g.idem = newIdempotence()
	g.merge = newMerger(g.prods, g.partitions, g.cfg.ProduceTimeout, g.log)
	return nil
}

// validPartition says whether topic has partition p (in the catalog).
func (g *Gateway) validPartition(topic string, p int32) bool {
	t, err := g.cat.Topic(topic)
	return err == nil && p >= 0 && int(p) < t.Partitions
}

// partitions is topic's partition count in the catalog (0: unknown).
func (g *Gateway) partitions(topic string) int {
	t, err := g.cat.Topic(topic)
	if err != nil {
		return 0
	}
	return t.Partitions
}

// advertised is the address clients are told: adv if given, else the
// listener's (an unspecified host becomes 127.0.0.1).
func advertised(adv string, addr net.Addr) (string, error) {
	if adv != "" {
		host, port, err := net.SplitHostPort(adv)
		if err != nil || host == "" || port == "" {
			return "", fmt.Errorf("%w: --kafka-advertise %q is not host:port", ErrConfig, adv)
		}
		return adv, nil
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "", fmt.Errorf("kafka gateway: listener address %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Addr is the listener's address.
func (g *Gateway) Addr() net.Addr { return g.ln.Addr() }

// Advertised is the address clients are told.
func (g *Gateway) Advertised() string { return g.advertise }

// BrokerID is the gateway's Kafka broker id.
func (g *Gateway) BrokerID() int32 { return g.cfg.BrokerID }

func (g *Gateway) accept() {
	defer g.wg.Done()
	var backoff time.Duration
	for {
		nc, err := g.ln.Accept()
		if err != nil {
			select {
			case <-g.quit:
				return
			default:
			}
			// A transient accept error (out of file descriptors) must not
			// end the listener: back off and keep going.
			backoff = min(max(5*time.Millisecond, 2*backoff), time.Second)
			g.log.Warn("kafka gateway: accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-g.quit:
				return
			}
		}
		backoff = 0
		if !g.track(nc) {
			continue
		}
	}
}

// track starts serving nc unless the gateway is closing or full.
func (g *Gateway) track(nc net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.quit:
		_ = nc.Close()
		return false
	default:
	}
	if len(g.conns) >= g.cfg.MaxConnections {
		g.log.Warn("kafka gateway: connection limit reached; refusing", "remote", nc.RemoteAddr().String(), "limit", g.cfg.MaxConnections)
		_ = nc.Close()
		return false
	}
	c := newConn(g, nc)
	g.conns[c] = struct{}{}
	g.m.Connections(1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		c.serve()
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
		g.m.Connections(-1)
	}()
	return true
}

// Close stops listening, closes every connection, deregisters the
// gateway and stops its producers and readers. It is idempotent.
func (g *Gateway) Close() error {
	var err error
	g.once.Do(func() {
		close(g.quit)
		err = g.ln.Close()
		g.mu.Lock()
		for c := range g.conns {
			c.close()
		}
		g.mu.Unlock()
		g.wg.Wait()
		g.stopParts()
		g.log.Info("kafka gateway stopped")
	})
	return err
}

func (g *Gateway) stopParts() {
	if g.fetches != nil {
		g.fetches.close()
	}
	if g.tails != nil {
		g.tails.close()
	}
	if g.prods != nil {
		g.prods.close()
	}
	if g.merge != nil {
		g.merge.wg.Wait()
	}
	if g.groups != nil {
		_ = g.groups.Close()
	}
	if g.reg != nil {
		g.reg.close()
	}
	if g.cat != nil {
		g.cat.Close()
	}
}
