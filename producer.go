package raidq

import (
	"context"
	"fmt"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/stripe"
)

// ProducerOption configures a producer.
type ProducerOption func(*actors.ProducerConfig)

// WithLinger sets how long an open batch waits for more records (default 2ms).
func WithLinger(d time.Duration) ProducerOption {
	return func(c *actors.ProducerConfig) { c.Linger = d }
}

// WithPipeline sets how many stripes per partition may await their ack
// while new batches close as soon as they hold as many records as the
// stripe acked last, instead of lingering (default 1; negative: always
// linger). See actors.ProducerConfig.Pipeline.
func WithPipeline(stripes int) ProducerOption {
	return func(c *actors.ProducerConfig) { c.Pipeline = stripes }
}

// WithMaxBatchBytes sets the batch size that closes a batch (default 256 KiB).
func WithMaxBatchBytes(n int) ProducerOption {
	return func(c *actors.ProducerConfig) { c.MaxBatchBytes = n }
}

// WithDeliveryTimeout makes a send retry until d has passed since its
// first attempt (backing off after the first 16 attempts) instead of
// failing after 16 attempts, about 2s with the default parameters: like
// Kafka's delivery.timeout.ms, a stalled machine or restarting nodes do
// not fail sends. Zero keeps the attempt count.
func WithDeliveryTimeout(d time.Duration) ProducerOption {
	return func(c *actors.ProducerConfig) { c.DeliveryTimeout = d }
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
