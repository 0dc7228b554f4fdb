package actors

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/internal/actorsys"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// ProducerConfig configures one producer of one topic.
type ProducerConfig struct {
	Topic string
	// Linger: an open batch closes this long after its first record
	// (default 2ms), unless the pipeline rule below closed it earlier.
	Linger time.Duration
	// Pipeline: while fewer than this many stripes of a partition await
	// their ack (W OKs), an open batch closes as soon as it reaches its
	// target instead of lingering: at each ack, the records that ack
	// released plus those already waiting. Callers that wait for their
	// ack come back together after it, so a batch closes the moment they
	// all have: one synchronous caller waits for nothing, sixteen share one
	// stripe. Records that arrive while the pipeline is full collect in
	// the open batch. Linger still bounds every wait (a target that is not
	// reached costs Linger once, then adapts). Default 1; negative: always
	// linger (the behaviour before pipelining).
	Pipeline int
	// MaxBatchBytes: an open batch closes at this size (default 256 KiB).
	MaxBatchBytes int
	// MaxInflight: stripes in flight per partition; closed batches beyond
	// it wait in order (default 32).
	MaxInflight int
	// MaxQueuedBatches: closed batches waiting per partition before sends
	// fail with ErrBusy (default 1024).
	MaxQueuedBatches int
	// Writer overrides the write rules derived from the topic (zero = derived).
	Writer core.WriterConfig
	// DeliveryTimeout, when > 0, is how long a send is retried before it
	// fails (core.WriterConfig.DeliveryTimeout, Kafka's
	// delivery.timeout.ms); 0: 16 attempts, about 2s with the defaults.
	DeliveryTimeout time.Duration
	// Seed seeds the producer's random source (jitter); 0 = random.
	Seed uint64
}

// ErrInvalidMessage: a send was given records it cannot take (a limit of
// the batch format or of the topic, a partition out of range).
var ErrInvalidMessage = errors.New("invalid message")

// SendResult is the outcome of one record's send, or of a whole batch's
// (SendBatch: Pos is the batch's first record).
type SendResult struct {
	Partition int
	Pos       core.Position
	Stripe    stripe.ID
	Err       error
}

// produce is one record handed to the producer actor.
type produce struct {
	rec       stripe.Record
	partition int // -1: choose
	cb        func(SendResult)
}

// produceBatch is a whole batch handed to the producer actor (SendBatch).
type produceBatch struct {
	recs      []stripe.Record
	partition int
	id        stripe.ID // zero: the producer's own next id
	cb        func(SendResult)
}

// produceRun is whole batches handed over together (SendRun).
type produceRun struct {
	partition int
	batches   []*produceBatch
}

type flushReq struct{ done chan struct{} }

// producerRefused: the cluster refused the producer's writes (Refuse).
type producerRefused struct{ err error }
type lingerFire struct {
	partition int
	gen       uint64
}
type producerTick struct{}

// Producer is the handle of a producer actor.
type Producer struct {
	c     *Client
	pid   *actor.PID
	ref   producerRef // pid's mailbox
	topic *meta.Topic
	a     *producerActor
}

// producerRef is a producer actor's mailbox: each method sends the
// message that the producerActor method of the same name handles (on the
// actor's goroutine, by way of Receive). Any goroutine may call them.
type producerRef struct {
	root *actor.RootContext
	pid  *actor.PID
}

// add: a record for producerActor.add.
func (r producerRef) add(rec stripe.Record, partition int, cb func(SendResult)) {
	r.root.Send(r.pid, &produce{rec: rec, partition: partition, cb: cb})
}

// addBatch: a batch for producerActor.addBatch.
func (r producerRef) addBatch(recs []stripe.Record, partition int, id stripe.ID, cb func(SendResult)) {
	r.root.Send(r.pid, &produceBatch{recs: recs, partition: partition, id: id, cb: cb})
}

// addRun: a run of batches for producerActor.addRun.
func (r producerRef) addRun(m *produceRun) { r.root.Send(r.pid, m) }

// refuse: a refusal for producerActor.refuse.
func (r producerRef) refuse(err error) { r.root.Send(r.pid, &producerRefused{err: err}) }

// flush: producerActor.flush closes done once every record sent before
// has its outcome.
func (r producerRef) flush(done chan struct{}) { r.root.Send(r.pid, &flushReq{done: done}) }

// Ticking says whether the producer's attempt-timeout tick runs: only
// while a stripe is in flight, so an idle producer costs no wake-ups.
func (p *Producer) Ticking() bool { return p.a.ticking.Load() }

// NewProducer spawns a producer actor for cfg.Topic.
func (c *Client) NewProducer(cfg ProducerConfig) (*Producer, error) {
	t, err := c.cfg.Catalog.Topic(cfg.Topic)
	if err != nil {
		return nil, err
	}
	return c.newProducer(t, cfg, nil)
}

// newProducer spawns a producer actor for topic t, in re-append mode if
// r is set (Reappend).
func (c *Client) newProducer(t *meta.Topic, cfg ProducerConfig, r *reappendReq) (*Producer, error) {
	if cfg.Linger <= 0 {
		cfg.Linger = 2 * time.Millisecond
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 256 << 10
	}
	if cfg.Pipeline == 0 {
		cfg.Pipeline = 1
	}
	cfg.MaxBatchBytes = min(cfg.MaxBatchBytes, stripe.MaxBatchBytes/2)
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 32
	}
	if cfg.MaxQueuedBatches <= 0 {
		cfg.MaxQueuedBatches = 1024
	}
	if cfg.Writer.Params.N == 0 {
		cfg.Writer = core.DefaultWriterConfig(t.Params)
	}
	if cfg.DeliveryTimeout > 0 {
		cfg.Writer.DeliveryTimeout = int64(cfg.DeliveryTimeout)
	}
	if cfg.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for _, x := range b {
			cfg.Seed = cfg.Seed<<8 | uint64(x)
		}
	}
	pa := newProducerActor(c, t, cfg)
	pa.reappend = r
	pid, err := c.spawn(actorsys.Props(c.pool, func() actor.Actor { return pa }))
	if err != nil {
		return nil, err
	}
	return &Producer{c: c, pid: pid, ref: producerRef{root: c.system.Root, pid: pid}, topic: t, a: pa}, nil
}

// Topic is the producer's topic.
func (p *Producer) Topic() *meta.Topic { return p.topic }

// Send hands a record to the producer; cb is called once with the outcome
// from the producer actor's goroutine, so it must not block. partition -1
// lets the producer choose (by key hash, else sticky round-robin).
func (p *Producer) Send(rec stripe.Record, partition int, cb func(SendResult)) {
	p.ref.add(rec, partition, cb)
}

// SendBatch writes recs to partition as one stripe of their own: the
// records commit together or not at all, at consecutive indexes from 0,
// and are never merged with other records. It first closes the
// partition's open batch, so records sent before it stay before it. id
// names the stripe (zero: the producer's own next id); a retry of a batch
// under the same id is delivered once, since readers drop repeated stripe
// ids (core.ReaderConfig.DedupeHorizon). A retry while the producer
// still holds the stripe (until its last node answered, or A+F after
// the ack) is not written again: it gets the stripe's outcome, at once
// if it was acked. A later retry is written again, and its Pos is that
// of the copy, which readers drop: the first Pos is where the records
// are read. A given id never collides with the producer's own: its
// ProducerID is random and ids with it are refused.
//
// cb is called once for the whole batch, from the producer actor's
// goroutine (it must not block), at the ack (W OKs) or failure as a
// record's would be: Pos is the stripe's offset with Index 0. It fails at
// once with ErrInvalidMessage for no records, more than
// MaxBatchRecords, a batch stripe.CheckBatch refuses or a partition out
// of range, and with ErrBusy while the partition's queue is full or a
// stripe of id is still being written to another partition. recs belong
// to the producer until cb.
func (p *Producer) SendBatch(recs []stripe.Record, partition int, id stripe.ID, cb func(SendResult)) {
	p.ref.addBatch(recs, partition, id, cb)
}

// RunBatch is one batch of a SendRun.
type RunBatch struct {
	Recs []stripe.Record
	ID   stripe.ID // zero: the producer's own next id
	CB   func(SendResult)
}

// SendRun is SendBatch for batches that follow each other: they are
// started together, in order, on one reading of the clock, so the writer
// gives their first attempts consecutive cells of the topic's offset grid
// (core.Writer's offsets rise from one Start to the next). A Kafka batch
// cut into stripes of G records is then read at the offsets its produce
// answer promised (the first stripe's offset + the record's index in the
// batch), unless a stripe has to move (a retry after a conflict or a
// refusal) or more batches are in flight on the partition than
// MaxInflight allows. A batch that SendBatch would refuse fails the
// whole run with its error before anything is written.
func (p *Producer) SendRun(partition int, batches []RunBatch) {
	m := &produceRun{partition: partition}
	for _, b := range batches {
		m.batches = append(m.batches, &produceBatch{recs: b.Recs, partition: partition, id: b.ID, cb: b.CB})
	}
	p.ref.addRun(m)
}

// Refuse fails every record of the producer without an outcome yet with
// err: the cluster refused its writes (a permission violation on the
// topic's slot subjects, which the server reports on the connection, not
// in a reply). The stripes already sent are not sent again. Records sent
// after it are written as usual (and, while the refusal lasts, refused
// again by the next violation their writes bring).
func (p *Producer) Refuse(err error) {
	p.ref.refuse(err)
}

// MaxBatchRecords is how many records one stripe of the topic may hold
// (quorum.Params.MaxStripeRecords): an open batch closes there, and a
// larger SendBatch is refused.
func (p *Producer) MaxBatchRecords() int { return p.a.maxRecs }

// Flush closes every open batch and waits until every record sent before
// it has its outcome, or ctx ends.
func (p *Producer) Flush(ctx context.Context) error {
	done := make(chan struct{})
	p.ref.flush(done)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flush: %w", ctx.Err())
	}
}

// Close flushes (bounded by ctx) and stops the producer; records still
// unresolved get ErrClosed.
func (p *Producer) Close(ctx context.Context) error {
	err := p.Flush(ctx)
	_ = p.c.system.Root.PoisonFuture(p.pid).Wait()
	return err
}

// Reappend writes payload (a stripe's batch, as stripe.Decode returns it)
// once more as stripe id on partition of t, exactly as a producer writes
// a batch: through a producer actor in re-append mode, so over the
// client's links to the nodes (a dead or saturated node costs a refused
// send, and every reply feeds the link's health), with the write rules
// derived from t (core.DefaultWriterConfig: a fresh offset from the
// client's clock, ClientConfig.Now, retried at fresh offsets up to
// MaxAttempts, acked at W). It returns the offset the stripe committed at
// once the writer is done with it: after the ack the writer keeps
// listening for late refusals for CommittedWait and rewrites the stripe
// once if one calls for it (docs/design.md#write-path step 7). Readers dedupe by stripe id, so
// the copy of a stripe that also committed elsewhere is delivered once.
// A node's repair loop re-appends in-doubt stripes with it (docs/design.md#read-path,
// actors/node/reappend.go). When ctx ends first, Reappend stops the write
// and returns ctx's error (an attempt already sent may still commit).
func (c *Client) Reappend(ctx context.Context, t *meta.Topic, partition uint32, id stripe.ID, payload []byte) (uint64, error) {
	if int(partition) >= t.Partitions {
		return 0, fmt.Errorf("re-append to %s/%d: topic has %d partitions", t.Name, partition, t.Partitions)
	}
	outcome := make(chan SendResult, 1) // the actor calls cb once, before settled
	settled := make(chan struct{})
	r := &reappendReq{partition: int(partition), id: id, payload: payload,
		cb: func(res SendResult) { outcome <- res }, settled: func() { close(settled) }}
	// The seed of the writer's jitter, as the node's hand-written driver
	// drew it before re-appends went through the producer actor.
	seed := uint64(c.cfg.Now()) ^ id.Seq
	p, err := c.newProducer(t, ProducerConfig{Topic: t.Name, Seed: seed}, r)
	if err != nil {
		return 0, fmt.Errorf("re-append to %s/%d: %w", t.Name, partition, err)
	}
	defer func() {
		// Settled (or given up on): nothing of the stripe is left to wait
		// for, so stop without waiting; Close must not poison it again.
		c.system.Root.Poison(p.pid)
		c.forget(p.pid)
	}()
	select {
	case <-settled:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case res := <-outcome:
		if res.Err != nil {
			return 0, res.Err
		}
		return res.Pos.Offset, nil
	default:
		return 0, fmt.Errorf("re-append to %s/%d: stripe %s settled without an outcome", t.Name, partition, id) // a bug
	}
}

// partitionOf picks a partition for a record.
func partitionOf(key []byte, partitions int, sticky int) int {
	if len(key) == 0 {
		return sticky % partitions
	}
	h := fnv.New32a()
	_, _ = h.Write(key)
	return int(h.Sum32() % uint32(partitions))
}

// newRand makes the producer's seeded random source.
func newRand(seed uint64) *mrand.Rand { return mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
