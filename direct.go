package raidq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus/meta"
)

// WithDirectNodes says whether a client made by Connect reaches each node
// through a connection to that node's own NATS server (the client URL of
// its member record) rather than through the server it connected to
// (default true). A shard then crosses one NATS server instead of two and
// a route, which cuts the write round trip and the servers' CPU per
// message. A node's server is dialed in the background at the first send
// to the node; until its connection is up, and where the server cannot be
// reached (or is the one the client is connected to), the main connection
// carries the node's requests. A failed dial is tried again on a later
// send, after a backoff of 1s doubling to 30s. ConnectConn never dials
// other servers.
func WithDirectNodes(on bool) Option { return func(o *options) { o.direct = &on } }

// directDialTimeout bounds dialing one node's server (and listing the
// member records for its URL): a node that cannot be reached quickly is
// reached through the main connection meanwhile.
const directDialTimeout = time.Second

// A failed dial (or a node without a member record yet) is tried again,
// on a send to the node, after a backoff of directRetryMin doubling to
// directRetryMax.
const (
	directRetryMin = time.Second
	directRetryMax = 30 * time.Second
)

// nodeDialer opens and owns the client's connections to the nodes' servers.
// It dials in the background: conn never waits for the member records or
// a dial, and mu is held for neither, so a slow or dead node's server
// stalls no sender (the node is reached through the main connection
// until its own connection is up).
type nodeDialer struct {
	meta *meta.Store
	main *nats.Conn
	opts []nats.Option
	log  *slog.Logger
	hub  *refusalHub // the client's: a node's server refuses like the main one

	// members lists the member records, dial connects to a node's server
	// (d.meta.Members and nats.Connect; tests replace them), and
	// retryMin/retryMax bound the backoff between dials of a node.
	members            func(context.Context) ([]meta.Member, error)
	dial               func(url string, opts ...nats.Option) (*nats.Conn, error)
	retryMin, retryMax time.Duration

	ctx    context.Context // ended by close: a listing under way stops
	cancel context.CancelFunc
	wg     sync.WaitGroup // the dials under way (close waits for them)

	mu      sync.Mutex         // held for no I/O
	urls    map[string]string  // node id -> client URL, from the member records
	nodes   map[string]*dialed // what each node's dialing came to
	listing chan struct{}      // closed when the listing under way ends (nil: none)
	listErr error              // the last listing's
	closed  bool
}

// dialed is the state of one node's connection.
type dialed struct {
	nc      *nats.Conn // up
	none    bool       // reached through the main connection for good (its server, or no client URL)
	dialing bool       // a dial is under way
	fails   int        // failed dials in a row
	wait    time.Duration
	retryAt time.Time // no dial before, after a failed one
}

func newNodeDialer(m *meta.Store, main *nats.Conn, opts []nats.Option, log *slog.Logger, hub *refusalHub) *nodeDialer {
	ctx, cancel := context.WithCancel(context.Background())
	d := &nodeDialer{meta: m, main: main, opts: opts, log: log, hub: hub, dial: nats.Connect,
		retryMin: directRetryMin, retryMax: directRetryMax, ctx: ctx, cancel: cancel,
		urls: make(map[string]string), nodes: make(map[string]*dialed)}
	if m != nil {
		d.members = m.Members
	}
	return d
}

// conn returns the connection to node's server (actors.ClientConfig.NodeConn):
// nil means the main connection for good, and the main connection itself
// "for now": the node's server is being dialed, or is dialed again once
// the backoff after a failed dial has passed (a later send asks again). It
// starts that dial and never waits for it.
func (d *nodeDialer) conn(node string) *nats.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	s := d.nodes[node]
	if s == nil {
		s = &dialed{}
		d.nodes[node] = s
	}
	switch {
	case s.nc != nil:
		return s.nc
	case s.none:
		return nil
	case s.dialing || time.Now().Before(s.retryAt):
		return d.main
	}
	s.dialing = true
	d.wg.Add(1) // under mu, not closed: close's Wait comes after
	go d.dialNode(node, s, s.fails > 0)
	return d.main
}

// dialNode dials node's server (on its own goroutine) and records the
// outcome in s. A retry (relist) reads the member records anew: the node
// may have come back elsewhere.
func (d *nodeDialer) dialNode(node string, s *dialed, relist bool) {
	defer d.wg.Done()
	u, known, err := d.lookup(node, relist)
	var nc *nats.Conn
	switch {
	case known && (u == "" || sameServer(u, d.main.ConnectedUrl())):
		err = nil // no server of its own to dial: the main connection, for good
	case known:
		nc, err = d.dial(u, d.dialOptions(node, u)...)
	case err == nil:
		err = errors.New("no member record")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s.dialing = false
	if d.closed {
		if nc != nil {
			nc.Close() // dialed after close: nobody will use it
		}
		return
	}
	switch {
	case nc != nil:
		d.hub.install(nc) // before anyone sends over it
		s.nc = nc
		if s.fails > 0 {
			d.log.Info("direct node connection up; reaching the node through it again", "node", node, "url", u, "failed_dials", s.fails)
		}
		s.fails, s.wait = 0, 0
	case err == nil:
		s.none = true
	default:
		s.fails++
		prev := s.wait
		s.wait = min(max(2*s.wait, d.retryMin), d.retryMax)
		s.retryAt = time.Now().Add(s.wait)
		level := slog.LevelWarn
		if prev == s.wait {
			level = slog.LevelDebug // logged at Warn when the backoff reached its bound
		}
		d.log.Log(context.Background(), level, "direct node connection failed; reaching the node through the main connection until a retry",
			"node", node, "url", u, "err", err, "retry_in", s.wait)
	}
}

// lookup returns node's client URL from the member records (known: the
// node has one), listing them when relist is set or the node is not among
// those listed before. Concurrent lookups share one listing; close stops
// it. The error is the listing's.
func (d *nodeDialer) lookup(node string, relist bool) (u string, known bool, err error) {
	d.mu.Lock()
	if u, ok := d.urls[node]; ok && !relist {
		d.mu.Unlock()
		return u, true, nil
	}
	done, owner := d.listing, false
	if done == nil {
		done, owner = make(chan struct{}), true
		d.listing = done
	}
	d.mu.Unlock()
	if owner {
		var ms []meta.Member
		err := errors.New("no member records (no metadata store)")
		if d.members != nil {
			ctx, cancel := context.WithTimeout(d.ctx, directDialTimeout)
			ms, err = d.members(ctx)
			cancel()
		}
		d.mu.Lock()
		for _, m := range ms {
			d.urls[m.ID] = m.ClientURL
		}
		d.listErr, d.listing = err, nil
		d.mu.Unlock()
		close(done)
	} else {
		select {
		case <-done:
		case <-d.ctx.Done():
			return "", false, d.ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	u, known = d.urls[node]
	if err = d.listErr; err != nil {
		err = fmt.Errorf("member records: %w", err)
	}
	return u, known, err
}

// dialOptions are the options of the connection to node's server at u.
func (d *nodeDialer) dialOptions(node, u string) []nats.Option {
	log := d.log.With("node", node, "url", u)
	return append(append([]nats.Option(nil), d.opts...), nats.Timeout(directDialTimeout),
		nats.Name("raidq-client-"+node), nats.MaxReconnects(-1),
		// While the node's server is gone, fail requests at once
		// instead of buffering them: the write quorum does not need
		// the node, and a buffer flushed on reconnect (ReconnectWait,
		// 2s, later) is a burst of stale requests that stalls
		// everything for ~100ms on a small machine.
		nats.ReconnectBufSize(-1),
		// A node going away is routine (the write quorum covers it):
		// log quietly instead of nats.go's default print to stderr.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Debug("direct node connection error", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Debug("direct node connection lost", "err", err)
		}))
}

// close stops the dials under way (a listing at once, a connect within
// directDialTimeout; what connects after close is closed), waits for them
// and closes every connection the dialer opened.
func (d *nodeDialer) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	var conns []*nats.Conn
	for _, s := range d.nodes {
		if s.nc != nil {
			conns = append(conns, s.nc)
		}
	}
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
	for _, nc := range conns {
		nc.Close()
	}
}

// sameServer reports whether two NATS URLs name the same host and port.
func sameServer(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host == ub.Host
}
