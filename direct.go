package raidq

import (
	"context"
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
// message. Where a node's server cannot be reached (or is the one the
// client is connected to), the main connection carries its requests.
// ConnectConn never dials other servers.
func WithDirectNodes(on bool) Option { return func(o *options) { o.direct = &on } }

// directDialTimeout bounds dialing one node's server: a node that cannot
// be reached quickly is reached through the main connection instead.
const directDialTimeout = time.Second

// nodeDialer opens and owns the client's connections to the nodes' servers.
type nodeDialer struct {
	meta *meta.Store
	main *nats.Conn
	opts []nats.Option
	log  *slog.Logger
	hub  *refusalHub // the client's: a node's server refuses like the main one

	mu     sync.Mutex
	urls   map[string]string // node id -> client URL, from the member records
	conns  map[string]*nats.Conn
	closed bool
}

func newNodeDialer(m *meta.Store, main *nats.Conn, opts []nats.Option, log *slog.Logger, hub *refusalHub) *nodeDialer {
	return &nodeDialer{meta: m, main: main, opts: opts, log: log, hub: hub, urls: make(map[string]string),
		conns: make(map[string]*nats.Conn)}
}

// conn returns the connection to node's server, dialing it on first use;
// nil means: use the main connection.
func (d *nodeDialer) conn(node string) *nats.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if nc, ok := d.conns[node]; ok {
		return nc
	}
	u, ok := d.urls[node]
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), directDialTimeout)
		ms, err := d.meta.Members(ctx)
		cancel()
		if err != nil {
			d.log.Debug("direct node connections: member records unavailable", "err", err)
		}
		for _, m := range ms {
			d.urls[m.ID] = m.ClientURL
		}
		u = d.urls[node]
	}
	var nc *nats.Conn
	if u != "" && !sameServer(u, d.main.ConnectedUrl()) {
		log := d.log.With("node", node, "url", u)
		opts := append(append([]nats.Option(nil), d.opts...), nats.Timeout(directDialTimeout),
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
		c, err := nats.Connect(u, opts...)
		if err != nil {
			d.log.Info("direct node connection failed; reaching the node through the main connection", "node", node, "url", u, "err", err)
		} else {
			nc = c
			d.hub.install(nc)
		}
	}
	d.conns[node] = nc // nil too: do not dial again
	return nc
}

// close closes every connection the dialer opened.
func (d *nodeDialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, nc := range d.conns {
		if nc != nil {
			nc.Close()
		}
	}
}

// sameServer reports whether two NATS URLs name the same host and port.
func sameServer(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host == ub.Host
}
