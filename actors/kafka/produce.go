package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/bus/kafkawire"
	"github.com/raidq/raidq/stripe"
)

// maxBatchBytes is the largest record a stripe can take, what
// DescribeConfigs reports as max.message.bytes (a batch is cut into
// stripes of at most the grid's records and about maxStripeBytes).
const maxBatchBytes = stripe.MaxBatchBytes / 2

// batchLimits bound what one Produce partition may decode to.
var batchLimits = kafkawire.Limits{MaxDecompressed: 64 << 20, MaxRecords: 1 << 20, MaxHeaders: 64}

// produce writes every partition's record batches, each as one stripe
// (or several, when a batch holds more records than the topic's grid
// allows), and answers once all are committed at W, or failed. acks=0
// gets no answer at all, as in Kafka; acks=1 means the same as all,
// since raidq has no leader whose single copy could be acknowledged.
func (c *conn) produce(ctx context.Context, r *kmsg.ProduceRequest) kmsg.Response {
	if r.TransactionID != nil {
		return c.produceRefused(r, kerr.UnsupportedVersion.Code, "transactions are not supported")
	}
	timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > c.g.cfg.ProduceTimeout {
		timeout = c.g.cfg.ProduceTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	var wg sync.WaitGroup
	for _, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		for i, p := range t.Partitions {
			rp := &rt.Partitions[i]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = p.Partition, -1, -1, -1
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.producePartition(ctx, t.Topic, p, rp)
			}()
		}
		resp.Topics = append(resp.Topics, rt)
	}
	wg.Wait()
	if r.Acks == 0 {
		return nil
	}
	return resp
}

func (c *conn) produceRefused(r *kmsg.ProduceRequest, code int16, msg string) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset = p.Partition, code, -1
			rp.ErrorMessage = kmsg.StringPtr(msg)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if r.Acks == 0 {
		return nil
	}
	return resp
}

// producePartition writes one partition's batches into rp.
func (c *conn) producePartition(ctx context.Context, topic string, p kmsg.ProduceRequestTopicPartition, rp *kmsg.ProduceResponseTopicPartition) {
	fail := func(code int16, msg string, args ...any) {
		rp.ErrorCode = code
		if msg != "" {
			rp.ErrorMessage = kmsg.StringPtr(fmt.Sprintf(msg, args...))
		}
	}
	if !c.allowed(OpProduce, topic) {
		fail(kerr.TopicAuthorizationFailed.Code, "")
		return
	}
	t, err := c.g.cat.Topic(topic)
	if err != nil || p.Partition < 0 || int(p.Partition) >= t.Partitions {
		fail(kerr.UnknownTopicOrPartition.Code, "")
		return
	}
	if !t.Params.Gridded() {
		fail(kerr.InvalidTopicException.Code, "topic %s has no offset grid (created before Kafka support); Kafka clients cannot use it", topic)
		return
	}
	batches, err := kafkawire.DecodeBatches(p.Records, batchLimits)
	if err != nil {
		code := produceDecodeErr(err)
		c.log.Warn("kafka gateway: refusing a produce batch", "topic", topic, "partition", p.Partition, "err", err)
		fail(code, "%v", err)
		return
	}
	grid := t.Params.MaxStripeRecords(stripe.MaxRecords)
	base := int64(-1)
	for i := range batches {
		off, code, err := c.produceBatch(ctx, topic, int(p.Partition), &batches[i], grid)
		if code != 0 {
			fail(code, "%v", err)
			return
		}
		if base < 0 {
			base = off
		}
	}
	rp.BaseOffset = base
}

func produceDecodeErr(err error) int16 {
	switch {
	case errors.Is(err, kafkawire.ErrOldMessageFormat):
		return kerr.UnsupportedForMessageFormat.Code
	case errors.Is(err, kafkawire.ErrTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, kafkawire.ErrCorruptBatch):
		return kerr.CorruptMessage.Code
	}
	return kerr.InvalidRecord.Code
}

// produceBatch writes one decoded batch, deduplicating an idempotent
// producer's retry, and returns its base Kafka offset.
func (c *conn) produceBatch(ctx context.Context, topic string, part int, b *kafkawire.Batch, grid int) (int64, int16, error) {
	if b.Transactional || b.Control {
		return 0, kerr.UnsupportedVersion.Code, errors.New("transactional batches are not supported")
	}
	if len(b.Records) == 0 {
		return 0, kerr.InvalidRecord.Code, errors.New("empty record batch")
	}
	key, idem := idemKey{topic: topic, part: int32(part), pid: b.ProducerID, epoch: b.ProducerEpoch, seq: b.BaseSequence}, b.ProducerID >= 0
	msgs, size := kafkaMessages(b)
	if idem {
		e, first := c.g.idem.claim(key)
		if !first {
			return e.wait(ctx)
		}
		var off int64
		var code int16
		var err error
		if len(msgs) <= grid && grid >= mergeMaxRecords && size <= maxStripeBytes {
			off, code, err = c.g.merge.send(ctx, mergeKey{topic: topic, part: int32(part), pid: b.ProducerID, epoch: b.ProducerEpoch},
				b.BaseSequence, msgs, size)
			if code == 0 {
				c.g.m.Records("produced", len(msgs))
			}
		} else {
			off, code, err = c.writeBatch(ctx, topic, part, b, msgs, grid)
		}
		e.resolve(off, code, err)
		return off, code, err
	}
	return c.writeBatch(ctx, topic, part, b, msgs, grid)
}

// kafkaMessages turns a batch's records into raidq messages and sizes
// them as chunkEnd does.
func kafkaMessages(b *kafkawire.Batch) ([]raidq.Message, int) {
	msgs := make([]raidq.Message, len(b.Records))
	size := 0
	for i, r := range b.Records {
		msgs[i] = raidq.Message{Key: r.Key, Value: r.Value, Headers: headers(r.Headers)}
		if r.Timestamp >= 0 {
			msgs[i].Time = time.UnixMilli(r.Timestamp)
		}
		size += recordBytes(&msgs[i])
	}
	return msgs, size
}

func recordBytes(m *raidq.Message) int {
	n := len(m.Key) + len(m.Value) + 16
	for _, h := range m.Headers {
		n += len(h.Name) + len(h.Value) + 8
	}
	return n
}

// writeBatch sends a batch as stripes of at most grid records: an
// idempotent producer's under stripe ids made from its producer id,
// epoch and the chunk's first sequence number, so a retry through any
// gateway carries the same ids and readers deliver it once.
func (c *conn) writeBatch(ctx context.Context, topic string, part int, b *kafkawire.Batch, msgs []raidq.Message, grid int) (int64, int16, error) {
	prod, err := c.g.prods.get(topic, part, c.g.partitions(topic))
	if err != nil {
		return 0, sendErr(err), err
	}
	// The chunks go out as one run: started together, they land on
	// consecutive grid cells, so record i of the Kafka batch is read at
	// base + i, as the produce answer tells the client (a chunk holds G
	// records, all but the last; docs/kafka.md#producing).
	var run []raidq.Batch
	for start := 0; start < len(msgs); {
		end := chunkEnd(msgs, start, grid)
		rb := raidq.Batch{Messages: msgs[start:end]}
		if b.ProducerID >= 0 {
			rb.Stripe = kafkaStripe(b.ProducerID, b.ProducerEpoch, int32(part), b.BaseSequence, start)
		}
		run = append(run, rb)
		start = end
	}
	pos, err := prod.SendBatches(ctx, part, run)
	if err != nil {
		c.log.Warn("kafka gateway: produce failed", "topic", topic, "partition", part, "records", len(msgs), "stripes", len(run), "err", err)
		return 0, sendErr(err), err
	}
	c.g.m.Records("produced", len(msgs))
	return kafkaOffset(pos[0]), 0, nil
}

// maxStripeBytes is the most record bytes the gateway puts in one stripe
// (the producer's default batch is 256 KiB; a stripe may hold 4 MiB).
const maxStripeBytes = 1 << 20

// chunkEnd is where the stripe starting at msgs[start] ends: at most grid
// records and about maxStripeBytes, and at least one record.
func chunkEnd(msgs []raidq.Message, start, grid int) int {
	end, size := start, 0
	for end < len(msgs) && end-start < grid {
		n := recordBytes(&msgs[end])
		if end > start && size+n > maxStripeBytes {
			break
		}
		size += n
		end++
	}
	return end
}

func headers(hs []kafkawire.Header) []raidq.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]raidq.Header, len(hs))
	for i, h := range hs {
		out[i] = raidq.Header{Name: h.Key, Value: h.Value}
	}
	return out
}

// kafkaStripe is the stripe id of an idempotent producer's records of
// one partition from sequence number seq+chunk: "kf" | producer id |
// epoch | partition. Kafka numbers sequences per partition, so the
// partition is part of the id: two partitions' batches at one sequence
// number are different stripes.
func kafkaStripe(pid int64, epoch int16, part int32, seq int32, chunk int) raidq.StripeID {
	var id raidq.StripeID
	copy(id.Producer[:2], "kf")
	binary.BigEndian.PutUint64(id.Producer[2:10], uint64(pid))
	binary.BigEndian.PutUint16(id.Producer[10:12], uint16(epoch))
	binary.BigEndian.PutUint32(id.Producer[12:16], uint32(part))
	id.Seq = uint64(uint32(seq)) + uint64(chunk)
	return id
}

// sendErr maps a raidq send error to a Kafka error code; the retriable
// ones make clients retry, as for a leader they lost.
func sendErr(err error) int16 {
	switch {
	case errors.Is(err, raidq.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, raidq.ErrInvalidMessage):
		return kerr.InvalidRecord.Code
	case errors.Is(err, raidq.ErrNotEnoughNodes), errors.Is(err, raidq.ErrClockSkew):
		return kerr.NotEnoughReplicas.Code
	case errors.Is(err, raidq.ErrBusy), errors.Is(err, raidq.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, raidq.ErrClosed), errors.Is(err, context.Canceled):
		return kerr.NotLeaderForPartition.Code // the gateway is closing: go elsewhere
	}
	return kerr.UnknownServerError.Code
}

// producers keeps one raidq producer per topic. A raidq producer knows
// the partitions its topic had when it opened, so a partition added since
// (CreatePartitions here, `raidq topic add-partitions`, another gateway)
// opens a new one; the old one is closed once every send it may still
// carry has ended (the send timeout).
type producers struct {
	c       *raidq.Client
	timeout time.Duration
	mu      sync.Mutex
	byTopic map[string]topicProducer
	retired sync.WaitGroup
	quit    chan struct{}
}

type topicProducer struct {
	p     *raidq.Producer
	parts int // the topic's partitions in the gateway's catalog when it opened
}

func newProducers(c *raidq.Client, timeout time.Duration) *producers {
	return &producers{c: c, timeout: timeout, byTopic: map[string]topicProducer{}, quit: make(chan struct{})}
}

// get returns the producer of topic, for a write to partition part of a
// topic with parts partitions (the gateway's catalog).
func (ps *producers) get(topic string, part, parts int) (*raidq.Producer, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	old, ok := ps.byTopic[topic]
	if ok && part < old.parts {
		return old.p, nil
	}
	p, err := ps.c.Producer(topic, raidq.WithDeliveryTimeout(ps.timeout))
	if err != nil {
		return nil, err
	}
	ps.byTopic[topic] = topicProducer{p: p, parts: parts}
	if ok {
		ps.retire(old.p)
	}
	return p, nil
}

// retire closes p after the longest send it may carry (ps.mu held).
func (ps *producers) retire(p *raidq.Producer) {
	ps.retired.Add(1)
	go func() {
		defer ps.retired.Done()
		t := time.NewTimer(ps.timeout)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ps.quit:
		}
		_ = p.Close()
	}()
}

// drop closes a deleted topic's producer.
func (ps *producers) drop(topic string) {
	ps.mu.Lock()
	tp, ok := ps.byTopic[topic]
	delete(ps.byTopic, topic)
	ps.mu.Unlock()
	if ok {
		_ = tp.p.Close()
	}
}

func (ps *producers) close() {
	ps.mu.Lock()
	all := ps.byTopic
	ps.byTopic = map[string]topicProducer{}
	ps.mu.Unlock()
	close(ps.quit)
	ps.retired.Wait()
	for _, tp := range all {
		_ = tp.p.Close()
	}
}
