package raidq

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/stripe"
)

// Option configures Connect.
type Option func(*options)

type options struct {
	cluster string
	logger  *slog.Logger
	catalog actors.Catalog
	now     func() int64
	name    string
	timeout time.Duration
	natsOpt []nats.Option
}

// WithCluster names the raidq cluster (the <cluster> subject token); default "raidq".
func WithCluster(name string) Option { return func(o *options) { o.cluster = name } }

// WithLogger routes the client's logs (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithCatalog gives the client its topic metadata.
func WithCatalog(c actors.Catalog) Option { return func(o *options) { o.catalog = c } }

// WithClock replaces the client clock (unix ns); drills use it to skew producers.
func WithClock(now func() int64) Option { return func(o *options) { o.now = now } }

// WithName names the NATS connection.
func WithName(n string) Option { return func(o *options) { o.name = n } }

// WithNATSOptions passes options to nats.Connect (credentials, TLS, ...).
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.natsOpt = append(o.natsOpt, opts...) }
}

// Client is a connection to a raidq cluster.
type Client struct {
	nc     *nats.Conn
	ownNC  bool
	core   *actors.Client
	logger *slog.Logger
}

// Connect dials a NATS URL and returns a client.
func Connect(url string, opts ...Option) (*Client, error) {
	o := buildOptions(opts)
	nopts := append([]nats.Option{nats.Name(o.name), nats.Timeout(o.timeout), nats.MaxReconnects(-1)}, o.natsOpt...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w (is a raidq node or `raidq dev` running there?)", url, err)
	}
	c, err := newClient(nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownNC = true
	return c, nil
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

func newClient(nc *nats.Conn, o options) (*Client, error) {
	if o.catalog == nil {
		return nil, fmt.Errorf("raidq client: no topic catalog given (use WithCatalog)")
	}
	cc, err := actors.NewClient(actors.ClientConfig{Cluster: o.cluster, Conn: nc, Catalog: o.catalog, Logger: o.logger, Now: o.now})
	if err != nil {
		return nil, err
	}
	return &Client{nc: nc, core: cc, logger: o.logger}, nil
}

// Close stops every producer and consumer of the client. Records not yet
// acknowledged fail with ErrClosed.
func (c *Client) Close() {
	c.core.Close()
	if c.ownNC {
		c.nc.Close()
	}
}

// ProducerOption configures a producer.
type ProducerOption func(*actors.ProducerConfig)

// WithLinger sets how long an open batch waits for more records (default 2ms).
func WithLinger(d time.Duration) ProducerOption {
	return func(c *actors.ProducerConfig) { c.Linger = d }
}

// WithMaxBatchBytes sets the batch size that closes a batch (default 256 KiB).
func WithMaxBatchBytes(n int) ProducerOption {
	return func(c *actors.ProducerConfig) { c.MaxBatchBytes = n }
}

// WithSeed seeds the producer's random choices (conflict jitter).
func WithSeed(s uint64) ProducerOption { return func(c *actors.ProducerConfig) { c.Seed = s } }

// Producer sends messages to one topic. It is safe for concurrent use.
type Producer struct {
	p     *actors.Producer
	topic string
}

// Producer returns a producer for topic.
func (c *Client) Producer(topic string, opts ...ProducerOption) (*Producer, error) {
	cfg := actors.ProducerConfig{Topic: topic}
	for _, f := range opts {
		f(&cfg)
	}
	p, err := c.core.NewProducer(cfg)
	if err != nil {
		return nil, err
	}
	return &Producer{p: p, topic: topic}, nil
}

// Send writes m and blocks until it is committed (W nodes hold its
// stripe's shards durably) or fails. The partition is chosen by key hash,
// else sticky round-robin; set m.Partition >= 0... is ignored: use
// SendTo to pick one.
func (p *Producer) Send(ctx context.Context, m Message) (Position, error) {
	return p.SendTo(ctx, -1, m)
}

// SendTo is Send to a given partition (-1: choose).
func (p *Producer) SendTo(ctx context.Context, partition int, m Message) (Position, error) {
	ch := make(chan actors.SendResult, 1)
	p.p.Send(m.record(), partition, func(r actors.SendResult) { ch <- r })
	select {
	case r := <-ch:
		return r.Pos, r.Err
	case <-ctx.Done():
		return Position{}, fmt.Errorf("send to %s: %w (the message may still be committed)", p.topic, ctx.Err())
	}
}

// SendAsync writes m and calls done once with the outcome; done runs on the
// producer's goroutine and must not block.
func (p *Producer) SendAsync(m Message, done func(Message, error)) {
	p.p.Send(m.record(), -1, func(r actors.SendResult) {
		m.Topic, m.Partition, m.Position, m.Stripe = p.topic, r.Partition, r.Pos, r.Stripe
		done(m, r.Err)
	})
}

// Flush closes open batches and waits for every pending outcome.
func (p *Producer) Flush(ctx context.Context) error { return p.p.Flush(ctx) }

// Close flushes (bounded by ctx) and stops the producer.
func (p *Producer) Close(ctx context.Context) error { return p.p.Close(ctx) }

func recordMessage(topic string, partition int, rec stripe.Record) Message {
	return Message{Topic: topic, Partition: partition, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
}
