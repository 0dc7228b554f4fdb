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
	unwatch      func() // stops the refusals watch (refusals.go)
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
	// A refused write is reported on the connection, not answered: fail
	// the sends waiting for an outcome with it instead of retrying them
	// into a timeout.
	unwatch := c.refusals.watch(c.refusals.producerSubjects(topic), func(pe *PermissionError) {
		p.Refuse(fmt.Errorf("send to %s: %w", topic, pe))
	})
	return &Producer{p: p, topic: topic, closeTimeout: pc.closeTimeout, unwatch: unwatch}, nil
}

// Send writes m and blocks until it is committed (W nodes hold its
// stripe's shards durably) or fails. A topic the user may not write fails
// it with ErrPermissionDenied (a *PermissionError) as soon as the cluster
// refuses the write. The partition is chosen by key hash,
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
	rec, err := m.record()
	if err != nil {
		done(m, fmt.Errorf("send to %s: %w", p.topic, err))
		return
	}
	p.p.Send(rec, -1, func(r actors.SendResult) {
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
	rec, err := m.record()
	if err != nil {
		f.resolve(m, fmt.Errorf("send to %s: %w", p.topic, err))
		return f
	}
	p.p.Send(rec, partition, func(r actors.SendResult) {
		m.Topic, m.Partition, m.Position, m.Stripe = p.topic, r.Partition, positionOf(r.Pos), r.Stripe
		f.resolve(m, r.Err)
	})
	return f
}

// BatchOption configures one SendBatch or ProduceBatch.
type BatchOption func(*batchConfig)

type batchConfig struct {
	id StripeID
}

// WithStripe writes the batch under this stripe id: a retry of the same
// batch with the same id is delivered once, since readers drop repeated
// stripe ids over the dedupe horizon (150 s of offsets). The zero id
// means the producer's own next one, as without the option. Ids of
// raidq's own producers are refused (ErrInvalidMessage): pick a Producer
// part of your own, e.g. one per Kafka producer id, and a Seq per batch.
// A retry while the producer still holds the stripe (up to about A+F
// after its ack) gets the first write's outcome and position; a later one
// is written again and returns the position of that copy, which readers
// drop: the records are read at the first position.
func WithStripe(id StripeID) BatchOption { return func(c *batchConfig) { c.id = id } }

// SendBatch writes msgs to partition as one stripe and blocks until it is
// committed or fails. The batch commits atomically: all of its messages
// or none. They get consecutive indexes from 0 in one stripe, written
// after every message this producer was given for the partition before
// the call, and are never merged with other messages. It returns the
// position of the first message (the stripe's offset, Index 0); message
// i is at Index i. A batch must hold 1 to as many messages as a stripe of
// the topic holds (its offset grid, 1024 by default), each with at most
// 64 headers, and encode to at most 4 MiB, else it fails with
// ErrInvalidMessage, as it does for a partition out of range; each
// message's Topic, Partition, Position, Stripe and Late are ignored. The
// producer holds msgs' bytes until the outcome: leave them alone. When
// ctx ends first the error wraps ctx.Err() and the batch may still be
// committed.
func (p *Producer) SendBatch(ctx context.Context, partition int, msgs []Message, opts ...BatchOption) (Position, error) {
	type outcome struct {
		pos Position
		err error
	}
	ch := make(chan outcome, 1)
	p.ProduceBatch(ctx, partition, msgs, func(pos Position, _ StripeID, err error) { ch <- outcome{pos, err} }, opts...)
	select {
	case o := <-ch:
		return o.pos, o.err
	case <-ctx.Done():
		return Position{}, fmt.Errorf("send batch to %s/%d: %w (the batch may still be committed)", p.topic, partition, ctx.Err())
	}
}

// SendBatches writes batches to partition as consecutive stripes, like
// SendBatch each, and blocks until every one is committed or one fails.
// They are started together, so a run of batches of the topic's full
// stripe size (its offset grid, 1024 records by default) lands on
// consecutive offsets: message j of batch i is at the first batch's
// offset plus i·1024 + j (the Kafka gateway answers a Kafka batch cut
// into stripes with that one base offset). A stripe that has to move (a
// retry after a conflict) or that waits behind the partition's in-flight
// limit lands further on. It returns each batch's position; on a failure
// the error of the first batch that failed (others may be committed).
func (p *Producer) SendBatches(ctx context.Context, partition int, batches []Batch) ([]Position, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("send batches to %s/%d: %w", p.topic, partition, err)
	}
	type outcome struct {
		i   int
		pos Position
		err error
	}
	ch := make(chan outcome, len(batches))
	run := make([]actors.RunBatch, len(batches))
	for i, b := range batches {
		recs := make([]stripe.Record, len(b.Messages))
		for j := range b.Messages {
			var err error
			if recs[j], err = b.Messages[j].record(); err != nil {
				return nil, fmt.Errorf("send batches to %s/%d: batch %d message %d: %w", p.topic, partition, i, j, err)
			}
		}
		run[i] = actors.RunBatch{Recs: recs, ID: b.Stripe,
			CB: func(r actors.SendResult) { ch <- outcome{i, positionOf(r.Pos), r.Err} }}
	}
	p.p.SendRun(partition, run)
	out := make([]Position, len(batches))
	var first error
	for range batches {
		select {
		case o := <-ch:
			out[o.i] = o.pos
			if o.err != nil && first == nil {
				first = o.err
			}
		case <-ctx.Done():
			return out, fmt.Errorf("send batches to %s/%d: %w (batches may still be committed)", p.topic, partition, ctx.Err())
		}
	}
	return out, first
}

// Batch is one batch of SendBatches: its messages, and the stripe id to
// write it under (zero: the producer's own; see WithStripe).
type Batch struct {
	Messages []Message
	Stripe   StripeID
}

// ProduceBatch is SendBatch with a callback: done is called once with
// the first message's position and the stripe id, or the error, from the
// producer's goroutine (it must not block); a batch refused before it is
// handed over (an ended ctx, a message's Time out of range) calls it
// before ProduceBatch returns.
func (p *Producer) ProduceBatch(ctx context.Context, partition int, msgs []Message, done func(Position, StripeID, error), opts ...BatchOption) {
	var bc batchConfig
	for _, f := range opts {
		f(&bc)
	}
	if err := ctx.Err(); err != nil {
		done(Position{}, bc.id, fmt.Errorf("send batch to %s/%d: %w", p.topic, partition, err))
		return
	}
	recs := make([]stripe.Record, len(msgs))
	for i := range msgs {
		var err error
		if recs[i], err = msgs[i].record(); err != nil {
			done(Position{}, bc.id, fmt.Errorf("send batch to %s/%d: message %d: %w", p.topic, partition, i, err))
			return
		}
	}
	p.p.SendBatch(recs, partition, bc.id, func(r actors.SendResult) { done(positionOf(r.Pos), r.Stripe, r.Err) })
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
		p.unwatch()
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
