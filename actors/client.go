package actors

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/internal/actorsys"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// ClientConfig configures the client side (producers and readers).
type ClientConfig struct {
	Cluster string
	Conn    *nats.Conn // not closed by the client
	// Bus, if set, is the way to the nodes instead of Conn (a simulated
	// bus: scenarios/sim); NodeConn is then not asked.
	Bus     Bus
	Catalog meta.Catalog
	Logger  *slog.Logger
	// Now is the client clock in unix ns; nil = time.Now. Tests and
	// drills skew it.
	Now  func() int64
	Link LinkConfig
	// NodeConn, if set, gives the connection to reach a node with (e.g.
	// one to the node's own NATS server, which saves each request a route
	// hop); nil, or a nil result, means Conn for good. It is called when
	// the node's link starts, outside the client's lock, and must not
	// block: while the node's connection is being dialed it answers Conn
	// itself ("Conn for now"), and the link's sends ask again, at most
	// every 100ms, until the answer is another connection (the link moves
	// to it, once) or nil. The client does not close it.
	NodeConn func(node string) *nats.Conn
	// Metrics receives the producer and reader metrics (nil = none).
	// Clients sharing a registry add to the same metrics.
	Metrics *prometheus.Registry
	// System, if set, is the actor system the client's actors run in;
	// Close then stops them but leaves the system running for the other
	// clients in it. Nil: the client makes its own.
	System *System
}

// Client owns the client actor system and one link per node (link.go).
type Client struct {
	cfg      ClientConfig
	subjects bus.Subjects
	system   *actor.ActorSystem
	pool     *actorsys.Pool // the actors' goroutines (dispatch.go)
	mu       sync.Mutex
	links    map[string]*link
	children []*actor.PID
	closed   bool
	metrics  *metrics.Client // nil: no metrics
}

// NewClient starts a client actor system.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	subj, err := bus.NewSubjects(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	var m *metrics.Client
	if cfg.Metrics != nil {
		if m, err = metrics.NewClient(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	var system *actor.ActorSystem
	if cfg.System != nil {
		system = cfg.System.sys
	} else {
		system = actorsys.NewSystem(cfg.Logger)
	}
	return &Client{cfg: cfg, subjects: subj, system: system, pool: actorsys.NewPool(actorsys.Throughput), links: make(map[string]*link), metrics: m}, nil
}

// Logger is the client's logger.
func (c *Client) Logger() *slog.Logger { return c.cfg.Logger }

// Subjects are the subjects of the client's cluster.
func (c *Client) Subjects() bus.Subjects { return c.subjects }

// Catalog is the client's topic catalog.
func (c *Client) Catalog() meta.Catalog { return c.cfg.Catalog }

// Metrics are the client's metrics (nil: none; nil is safe to use).
func (c *Client) Metrics() *metrics.Client { return c.metrics }

// link returns the link to node, made on first use. A link that cannot
// subscribe (the connection is closed) is an error; the next call tries again.
// A new link starts on Conn; the caller that made it asks NodeConn once,
// outside the lock, and the link moves when that (or a later) answer is
// the node's own connection (link.offer). No one waits for a dial.
func (c *Client) link(node string) (*link, error) {
	c.mu.Lock()
	if l, ok := c.links[node]; ok {
		c.mu.Unlock()
		return l, nil
	}
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("client: %w", core.ErrClosed)
	}
	nodeConn := c.cfg.NodeConn
	if c.cfg.Bus != nil {
		nodeConn = nil
	}
	l, err := newLink(c.system, node, c.bus(), nodeConn, c.cfg.Link) // no network round trip
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.links[node] = l
	c.mu.Unlock()
	if nodeConn != nil {
		l.offer(nodeConn(node))
	}
	return l, nil
}

// Request sends data to node on subject through the client's link to the
// node and waits for the reply's payload. It is the one request path to
// a node, besides a producer's shards: it shares the link's outstanding
// requests and health with them, so a saturated link refuses it at once
// (ErrLinkSaturated) and it counts as outstanding until answered or given
// up. It gives up with ErrLinkTimeout after timeout or the link's
// timeout (ClientConfig.Link), whichever is shorter (timeout <= 0: the
// link's), and with ctx's error (wrapped) when ctx ends first. A node
// nothing answers for (not subscribed: down) is ErrNoResponders; a closed
// client is core.ErrClosed, a closed link ErrLinkClosed. The request goes
// over the node's connection (ClientConfig.NodeConn) like the shards do.
// Any goroutine may call it.
func (c *Client) Request(ctx context.Context, node, subject string, data []byte, timeout time.Duration) ([]byte, error) {
	l, err := c.link(node)
	if err != nil {
		return nil, err
	}
	b, _, err := l.request(ctx, subject, data, timeout)
	return b, err
}

// spawn starts a top-level client actor (producer, reader) and remembers
// it so Close can poison it.
func (c *Client) spawn(p *actor.Props) (*actor.PID, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("client: %w", core.ErrClosed)
	}
	pid := c.system.Root.Spawn(p)
	c.children = append(c.children, pid)
	return pid, nil
}

// forget drops a stopped top-level actor from the list Close poisons.
func (c *Client) forget(pid *actor.PID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.children {
		if p.Equal(pid) {
			c.children = append(c.children[:i], c.children[i+1:]...)
			return
		}
	}
}

// Close stops every producer, reader and link (poisoning them; protoactor's
// Shutdown alone stops no actors) and the actor system, unless it is a
// shared one (ClientConfig.System).
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	children := append([]*actor.PID(nil), c.children...)
	links := make([]*link, 0, len(c.links))
	for _, l := range c.links {
		links = append(links, l)
	}
	c.mu.Unlock()
	for _, pid := range children {
		_ = c.system.Root.PoisonFuture(pid).Wait()
	}
	for _, l := range links {
		l.close()
	}
	if c.cfg.System == nil {
		c.system.Shutdown()
	}
	c.pool.Close()
}
