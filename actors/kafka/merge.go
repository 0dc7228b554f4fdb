package kafka

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/raidq/raidq"
)

// Coalescing an idempotent producer's batches. A Kafka producer keeps up
// to five requests in flight, and a synchronous one sends batches of a
// record or two: written one stripe each, the nodes would store, fsync
// and answer several times as many stripes per record as for raidq's own
// producer. So while one stripe of a producer's partition is being
// written, the batches that arrive for it wait, and go out together as
// the next stripe, the native producer's pipeline rule. Only batches with
// contiguous sequence numbers share a stripe: its record i is sequence
// Seq+i (stripe.Numbered), so a retry of any one batch, through any
// gateway, is recognised record by record by readers.

// mergeKey is one producer session's partition.
type mergeKey struct {
	topic string
	part  int32
	pid   int64
	epoch int16
}

// mergeItem is one batch waiting for its stripe.
type mergeItem struct {
	seq   int32
	msgs  []raidq.Message
	bytes int
	done  chan struct{}
	base  int64 // the batch's first Kafka offset
	code  int16
	err   error
}

type mergeQueue struct {
	busy  bool // a stripe of this key is being written
	queue []*mergeItem
}

// merger coalesces batches per mergeKey.
type merger struct {
	prods      *producers
	partitions func(topic string) int // the topic's partitions in the gateway's catalog
	timeout    time.Duration
	log        *slog.Logger

	mu sync.Mutex
	qs map[mergeKey]*mergeQueue
	wg sync.WaitGroup // running writers (wait: after the producers closed, they drain at once)
}

func newMerger(prods *producers, partitions func(string) int, timeout time.Duration, log *slog.Logger) *merger {
	return &merger{prods: prods, partitions: partitions, timeout: timeout, log: log, qs: map[mergeKey]*mergeQueue{}}
}

// send writes msgs (one batch from sequence seq, at most one stripe's
// worth) with whatever batches of k wait beside it, and returns the
// batch's first Kafka offset.
func (m *merger) send(ctx context.Context, k mergeKey, seq int32, msgs []raidq.Message, bytes int) (int64, int16, error) {
	it := &mergeItem{seq: seq, msgs: msgs, bytes: bytes, done: make(chan struct{})}
	m.mu.Lock()
	q := m.qs[k]
	if q == nil {
		q = &mergeQueue{}
		m.qs[k] = q
	}
	q.queue = append(q.queue, it)
	if !q.busy {
		q.busy = true
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.run(k, q)
		}()
	}
	m.mu.Unlock()
	select {
	case <-it.done:
		return it.base, it.code, it.err
	case <-ctx.Done():
		return 0, sendErr(ctx.Err()), ctx.Err()
	}
}

// run writes k's waiting batches, a contiguous run at a time, until none
// wait.
func (m *merger) run(k mergeKey, q *mergeQueue) {
	for {
		m.mu.Lock()
		if len(q.queue) == 0 {
			q.busy = false
			delete(m.qs, k)
			m.mu.Unlock()
			return
		}
		items := takeRun(q)
		m.mu.Unlock()
		m.write(k, items)
	}
}

// takeRun removes from q the lowest-sequence batch and the batches that
// continue its sequence, up to one stripe (the grid's records, about
// maxStripeBytes). Called with m.mu held.
func takeRun(q *mergeQueue) []*mergeItem {
	sort.Slice(q.queue, func(i, j int) bool { return q.queue[i].seq < q.queue[j].seq })
	run := []*mergeItem{q.queue[0]}
	next, records, bytes := int64(q.queue[0].seq)+int64(len(q.queue[0].msgs)), len(q.queue[0].msgs), q.queue[0].bytes
	n := 1
	for ; n < len(q.queue); n++ {
		it := q.queue[n]
		if int64(it.seq) != next || records+len(it.msgs) > mergeMaxRecords || bytes+it.bytes > maxStripeBytes {
			break
		}
		run = append(run, it)
		next += int64(len(it.msgs))
		records += len(it.msgs)
		bytes += it.bytes
	}
	q.queue = append(q.queue[:0:0], q.queue[n:]...)
	return run
}

// mergeMaxRecords bounds a coalesced stripe (the default grid; a topic
// with a smaller grid gets single batches only, see canMerge).
const mergeMaxRecords = 1024

// write sends one run as one stripe and answers each batch of it.
func (m *merger) write(k mergeKey, items []*mergeItem) {
	var all []raidq.Message
	for _, it := range items {
		all = append(all, it.msgs...)
	}
	finish := func(base int64, code int16, err error) {
		idx := int64(0)
		for _, it := range items {
			it.base, it.code, it.err = base+idx, code, err
			idx += int64(len(it.msgs))
			close(it.done)
		}
	}
	prod, err := m.prods.get(k.topic, int(k.part), m.partitions(k.topic))
	if err != nil {
		finish(0, sendErr(err), err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	id := kafkaStripe(k.pid, k.epoch, k.part, items[0].seq, 0)
	pos, err := prod.SendBatch(ctx, int(k.part), all, raidq.WithStripe(id))
	if err != nil {
		m.log.Warn("kafka gateway: produce failed", "topic", k.topic, "partition", k.part, "batches", len(items), "records", len(all), "err", err)
		finish(0, sendErr(err), err)
		return
	}
	finish(kafkaOffset(pos), 0, nil)
}
