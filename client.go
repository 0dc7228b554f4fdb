package raidq

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/bus/meta"
)

// Option configures Connect.
type Option func(*options)

type options struct {
	cluster string
	logger  *slog.Logger
	now     func() int64 // the client clock, unix ns; nil: the wall clock (hooks.go)
	name    string
	timeout time.Duration
	natsOpt []nats.Option
	metrics *prometheus.Registry
	direct  *bool         // WithDirectNodes (direct.go); nil: on for Connect
	dialOpt []nats.Option // Connect's options, for direct node connections
	// refusals gets the refusals no operation claims (WithRefusalHandler).
	refusals func(*PermissionError)
}

// WithCluster names the raidq cluster (the <cluster> subject token); default "raidq".
func WithCluster(name string) Option { return func(o *options) { o.cluster = name } }

// WithLogger routes the client's logs (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithName names the NATS connection.
func WithName(n string) Option { return func(o *options) { o.name = n } }

// WithNATSOptions passes options to nats.Connect (credentials, TLS, ...).
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.natsOpt = append(o.natsOpt, opts...) }
}

// WithCreds authenticates with a NATS credentials file.
func WithCreds(file string) Option {
	return func(o *options) {
		if file != "" {
			o.natsOpt = append(o.natsOpt, nats.UserCredentials(file))
		}
	}
}

// WithTimeout bounds connecting and each metadata call (default 5s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Client is a connection to a raidq cluster.
type Client struct {
	nc      *nats.Conn
	ownNC   bool
	core    *actors.Client
	logger  *slog.Logger
	meta    *meta.Store          // nil when topics were given with WithCatalog
	watched *meta.WatchedCatalog // the KV-watched catalog this client started, if any
	cluster string
	dialer  *nodeDialer // direct node connections (direct.go); nil: none
	// refusals hands the permission violations of the client's
	// connections to the operations they end (refusals.go).
	refusals *refusalHub

	closeOnce sync.Once
}

// Connect dials a NATS URL and returns a client.
func Connect(url string, opts ...Option) (*Client, error) {
	o := buildOptions(opts)
	nopts := append(failoverOptions(o), o.natsOpt...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		if localOptionErr(nopts) { // a missing NKey or CA file: nothing was dialled, no server to blame
			return nil, fmt.Errorf("connect to %s: %w", url, err)
		}
		if hint := connectHint(url, err, nopts); hint != "" { // security.go
			return nil, fmt.Errorf("connect to %s: %w: %s", url, err, hint)
		}
		return nil, fmt.Errorf("connect to %s: %w (is a raidq node or `raidq dev` running there?)", url, err)
	}
	if o.direct == nil {
		on := true
		o.direct = &on
	}
	o.dialOpt = nopts
	c, err := newClient(nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownNC = true
	return c, nil
}

// Client connection liveness: a server that dies, hangs (SIGSTOP) or is
// cut off is noticed within about PingInterval*(MaxPingsOutstanding+1)
// (nats.go's defaults, 2 min and 2, would take four minutes), and the
// connection moves to another URL of the list after ReconnectWait.
const (
	clientPingInterval = time.Second
	clientMaxPings     = 3
	clientReconnect    = 250 * time.Millisecond
)

// failoverOptions are the nats.Connect options every client connection
// gets before the caller's own (WithNATSOptions may override them).
func failoverOptions(o options) []nats.Option {
	return []nats.Option{nats.Name(o.name), nats.Timeout(o.timeout), nats.MaxReconnects(-1),
		nats.PingInterval(clientPingInterval), nats.MaxPingsOutstanding(clientMaxPings),
		nats.ReconnectWait(clientReconnect), nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // closed on purpose (Client.Close), nothing to reconnect
			}
			o.logger.Warn("NATS connection lost; reconnecting to another server of the list", "server", nc.ConnectedUrlRedacted(), "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			o.logger.Info("NATS connection restored", "server", nc.ConnectedUrlRedacted())
		})}
}

// ConnectConn builds a client over an existing NATS connection (in-process
// or shared). The connection is not closed by Close.
func ConnectConn(nc *nats.Conn, opts ...Option) (*Client, error) {
	return newClient(nc, buildOptions(opts))
}

func buildOptions(opts []Option) options {
	o := options{cluster: "raidq", logger: slog.Default(), name: "raidq-client", timeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// newClient builds the client: it binds the cluster's metadata in
// JetStream KV and watches its topics.
func newClient(nc *nats.Conn, o options) (*Client, error) {
	c := &Client{nc: nc, logger: o.logger, cluster: o.cluster, refusals: newRefusalHub(o.cluster, o.refusals)}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	m, err := meta.Open(ctx, nc, o.cluster, meta.Options{Timeout: o.timeout, Logger: o.logger})
	if err != nil {
		return nil, fmt.Errorf("raidq cluster %q at %s: %w", o.cluster, nc.ConnectedUrlRedacted(), err)
	}
	c.meta = m
	cat, err := c.meta.WatchCatalog(ctx)
	if err != nil {
		return nil, fmt.Errorf("raidq cluster %q: metadata unavailable: the topic catalog could not be read within %v "+
			"(JetStream has no leader for it: more than two servers down, or an election under way; raidq status shows "+
			"which nodes answer): %w", o.cluster, o.timeout, err)
	}
	c.watched = cat
	cfg := actors.ClientConfig{Cluster: o.cluster, Conn: nc, Catalog: cat, Logger: o.logger, Now: o.now, Metrics: o.metrics}
	if o.direct != nil && *o.direct && o.dialOpt != nil {
		c.dialer = newNodeDialer(c.meta, nc, o.dialOpt, o.logger, c.refusals)
		cfg.NodeConn = c.dialer.conn
	}
	cc, err := actors.NewClient(cfg)
	if err != nil {
		c.watched.Close()
		return nil, err
	}
	c.core = cc
	// Nothing was asked of the cluster that a refusal could end before
	// this (the metadata reads are everyone's).
	c.refusals.install(nc)
	return c, nil
}

// Close stops every producer and consumer of the client. Records not yet
// acknowledged fail with ErrClosed. Close is idempotent; it returns the
// error of the first call (none so far: it cannot fail, but callers
// should not rely on that).
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.core.Close()
		if c.dialer != nil {
			c.dialer.close()
		}
		c.watched.Close()
		if c.ownNC {
			c.nc.Close()
		}
		c.refusals.close()
	})
	return nil
}
