package raidq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/stripe"
)

// ProducerOption configures a producer (Client.Producer).
type ProducerOption func(*producerConfig)

type producerConfig struct {
	cfg          actors.ProducerConfig
	closeTimeout time.Duration
}

// WithLinger sets how long an open batch waits for more records (default 2ms).
func WithLinger(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.cfg.Linger = d }
}

// WithPipeline sets how many stripes per partition may await their ack
// while new batches close as soon as they hold as many records as the
// stripe acked last, instead of lingering (default 1; negative: always
// linger).
func WithPipeline(stripes int) ProducerOption {
	return func(c *producerConfig) { c.cfg.Pipeline = stripes }
}

// WithMaxBatchBytes sets the batch size that closes a batch (default 256 KiB).
func WithMaxBatchBytes(n int) ProducerOption {
	return func(c *producerConfig) { c.cfg.MaxBatchBytes = n }
}

// WithDeliveryTimeout makes a send retry until d has passed since its
// first attempt (backing off after the first 16 attempts) instead of
// failing after 16 attempts, about 2s with the default parameters: like
// Kafka's delivery.timeout.ms, a stalled machine or restarting nodes do
// not fail sends. Zero keeps the attempt count.
func WithDeliveryTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.cfg.DeliveryTimeout = d }
}

// WithSeed seeds the producer's random choices (conflict jitter).
func WithSeed(s uint64) ProducerOption { return func(c *producerConfig) { c.cfg.Seed = s } }

// WithCloseTimeout bounds how long Close waits for the outcomes of
// records already sent (default 10s, or the delivery timeout if longer).
func WithCloseTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.closeTimeout = d }
}

// Producer sends messages to one topic. It is safe for concurrent use.
type Producer struct {
	p            *actors.Producer
	topic        string
	closeTimeout time.Duration
	closeOnce    sync.Once
	closeErr     error
}

// Producer returns a producer for topic.
func (c *Client) Producer(topic string, opts ...ProducerOption) (*Producer, error) {
	pc := producerConfig{cfg: actors.ProducerConfig{Topic: topic}}
	for _, f := range opts {
		f(&pc)
	}
	if pc.closeTimeout <= 0 {
		pc.closeTimeout = max(10*time.Second, pc.cfg.DeliveryTimeout)
	}
	p, err := c.core.NewProducer(pc.cfg)
	if err != nil {
		return nil, err
	}
	return &Producer{p: p, topic: topic, closeTimeout: pc.closeTimeout}, nil
}

// Send writes m and blocks until it is committed (W nodes hold its
// stripe's shards durably) or fails. The partition is chosen by key hash,
// else sticky round-robin; m.Partition must be 0 (SendTo picks one).
// When ctx ends first the error wraps ctx.Err() and the message may still
// be committed.
func (p *Producer) Send(ctx context.Context, m Message) (Position, error) {
	if m.Partition != 0 {
		return Position{}, fmt.Errorf("send to %s: %w: Partition %d is set; use SendTo to choose a partition",
			p.topic, ErrInvalidMessage, m.Partition)
	}
	return p.SendTo(ctx, -1, m)
}

// SendTo is Send to a given partition (-1: choose).
func (p *Producer) SendTo(ctx context.Context, partition int, m Message) (Position, error) {
	f := p.send(ctx, partition, m)
	r, err := f.Wait(ctx)
	return r.Position, err
}

// SendAsync hands m to the producer and returns at once; the future
// resolves with the committed message (Topic, Partition, Position and
// Stripe set) or the error. A ctx that has ended already fails the send
// without writing; once handed over, the write goes on (wait with a ctx of
// your own: SendFuture.Wait). Flush waits for every pending send.
func (p *Producer) SendAsync(ctx context.Context, m Message) *SendFuture {
	if m.Partition != 0 {
		f := newSendFuture()
		f.resolve(m, fmt.Errorf("send to %s: %w: Partition %d is set; use SendTo to choose a partition",
			p.topic, ErrInvalidMessage, m.Partition))
		return f
	}
	return p.send(ctx, -1, m)
}

// Produce is SendAsync with a callback instead of a future (no allocation
// per message beyond the record): done is called once, from the
// producer's goroutine, and must not block.
func (p *Producer) Produce(ctx context.Context, m Message, done func(Message, error)) {
	if err := ctx.Err(); err != nil {
		done(m, fmt.Errorf("send to %s: %w", p.topic, err))
		return
	}
	if m.Partition != 0 {
		done(m, fmt.Errorf("send to %s: %w: Partition %d is set; use SendTo to choose a partition",
			p.topic, ErrInvalidMessage, m.Partition))
		return
	}
	p.p.Send(m.record(), -1, func(r actors.SendResult) {
		m.Topic, m.Partition, m.Position, m.Stripe = p.topic, r.Partition, positionOf(r.Pos), r.Stripe
		done(m, r.Err)
	})
}

func (p *Producer) send(ctx context.Context, partition int, m Message) *SendFuture {
	f := newSendFuture()
	if err := ctx.Err(); err != nil {
		f.resolve(m, fmt.Errorf("send to %s: %w", p.topic, err))
		return f
	}
	p.p.Send(m.record(), partition, func(r actors.SendResult) {
		m.Topic, m.Partition, m.Position, m.Stripe = p.topic, r.Partition, positionOf(r.Pos), r.Stripe
		f.resolve(m, r.Err)
	})
	return f
}

// Flush closes open batches and waits for every pending outcome.
func (p *Producer) Flush(ctx context.Context) error { return p.p.Flush(ctx) }

// Close waits (up to the close timeout, WithCloseTimeout) for the
// outcomes of the records already sent, then stops the producer; records
// still unresolved fail with ErrClosed. For a bound of your own, Flush
// first. Close is idempotent.
func (p *Producer) Close() error {
	p.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.closeTimeout)
		defer cancel()
		p.closeErr = p.p.Close(ctx)
	})
	return p.closeErr
}

// SendFuture is the pending outcome of SendAsync.
type SendFuture struct {
	done chan struct{}
	msg  Message
	err  error
}

func newSendFuture() *SendFuture { return &SendFuture{done: make(chan struct{})} }

func (f *SendFuture) resolve(m Message, err error) {
	f.msg, f.err = m, err
	close(f.done)
}

// Done is closed once the outcome is known.
func (f *SendFuture) Done() <-chan struct{} { return f.done }

// Result is the outcome; call it after Done is closed (before, it
// returns ErrPending).
func (f *SendFuture) Result() (Message, error) {
	select {
	case <-f.done:
		return f.msg, f.err
	default:
		return Message{}, ErrPending
	}
}

// Wait blocks until the outcome is known or ctx ends (then the error
// wraps ctx.Err() and the message may still be committed).
func (f *SendFuture) Wait(ctx context.Context) (Message, error) {
	select {
	case <-f.done:
		return f.msg, f.err
	case <-ctx.Done():
		return Message{}, fmt.Errorf("send: %w (the message may still be committed)", ctx.Err())
	}
}

func recordMessage(topic string, partition int, rec stripe.Record) Message {
	return Message{Topic: topic, Partition: partition, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
}
