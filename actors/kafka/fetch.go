package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/bus/kafkawire"
	"github.com/raidq/raidq/bus/meta"
)

// Fetch bounds.
const (
	maxFetchWait  = 30 * time.Second
	maxFetchBytes = 64 << 20
)

// fetchPart is one partition of a fetch being answered.
type fetchPart struct {
	topic *meta.Topic
	part  int
	rp    *kmsg.FetchResponseTopicPartition
	s     *session
	off   int64
	max   int
}

// fetch answers with what the partitions' sessions hold at the asked
// offsets, waiting up to MaxWaitMillis for MinBytes (long polling).
// Records are re-encoded as one v2 batch per stripe, with each record's
// offset = stripe offset + index (docs/kafka.md); gaps between them are
// normal.
func (c *conn) fetch(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	parts := c.fetchParts(r, resp)
	wait := min(time.Duration(r.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	deadline := time.NewTimer(max(wait, 0))
	defer deadline.Stop()
	maxBytes := int(r.MaxBytes)
	if maxBytes <= 0 || maxBytes > maxFetchBytes {
		maxBytes = maxFetchBytes
	}
	for {
		size, n, arrived := c.fill(ctx, parts, maxBytes)
		if size >= int(r.MinBytes) && (size > 0 || r.MinBytes <= 0) || len(arrived) == 0 {
			c.g.m.Records("fetched", n)
			return resp
		}
		if !waitAny(ctx, deadline.C, arrived) {
			_, n, _ = c.fill(ctx, parts, maxBytes)
			c.g.m.Records("fetched", n)
			return resp
		}
	}
}

// fetchParts resolves every asked partition to its session, answering
// the ones that cannot be read with their error at once.
func (c *conn) fetchParts(r *kmsg.FetchRequest, resp *kmsg.FetchResponse) []fetchPart {
	var parts []fetchPart
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
		resp.Topics = append(resp.Topics, rt)
		rtp := &resp.Topics[len(resp.Topics)-1]
		for i, p := range t.Partitions {
			rp := &rtp.Partitions[i]
			*rp = kmsg.NewFetchResponseTopicPartition()
			rp.RecordBatches = []byte{}
			rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.Partition, -1, -1, -1
			s, mt, code := c.session(t.Topic, p.Partition, p.FetchOffset)
			if code != 0 {
				rp.ErrorCode = code
				continue
			}
			parts = append(parts, fetchPart{topic: mt, part: int(p.Partition), rp: rp, s: s, off: p.FetchOffset, max: int(p.PartitionMaxBytes)})
		}
	}
	return parts
}

// session finds or starts the read session for a fetch of topic/part at off.
func (c *conn) session(topic string, part int32, off int64) (*session, *meta.Topic, int16) {
	if !c.allowed(OpConsume, topic) {
		return nil, nil, kerr.TopicAuthorizationFailed.Code
	}
	t, err := c.g.cat.Topic(topic)
	if err != nil || part < 0 || int(part) >= t.Partitions {
		return nil, nil, kerr.UnknownTopicOrPartition.Code
	}
	if !t.Params.Gridded() {
		return nil, nil, kerr.InvalidTopicException.Code
	}
	// An offset beyond what any node can accept yet is out of range, so
	// the client resets (auto.offset.reset) rather than waiting forever.
	if off < 0 || off > timeOffset(time.Now().Add(t.Params.FutureBound+time.Minute), t.Params.Grid) {
		return nil, nil, kerr.OffsetOutOfRange.Code
	}
	s, err := c.g.fetches.get(sessionKey{conn: c, topic: topic, part: int(part)}, t.Params.Grid, off)
	if err != nil {
		c.log.Warn("kafka gateway: cannot start a partition reader", "topic", topic, "partition", part, "err", err)
		if errors.Is(err, ErrTooManySessions) {
			return nil, nil, kerr.PolicyViolation.Code
		}
		return nil, nil, sendErr(err)
	}
	return s, t, 0
}

// fill (re)builds every partition's records from its session and
// returns the bytes and records given and the channels that signal more
// records for the partitions still empty. The high watermark is the
// partition's tail (tail.go), at least the offset after the newest record
// the session holds.
func (c *conn) fill(ctx context.Context, parts []fetchPart, maxBytes int) (int, int, []<-chan struct{}) {
	total, records := 0, 0
	var arrived []<-chan struct{}
	for i := range parts {
		fp := &parts[i]
		budget := fp.max
		if budget <= 0 || budget > maxBytes-total {
			budget = maxBytes - total
		}
		msgs, seen, ch, err := fp.s.take(fp.off, max(budget, 1))
		rp := fp.rp
		high := c.g.tails.high(ctx, fp.topic, fp.part, seen)
		rp.HighWatermark, rp.LastStableOffset = high, high
		rp.LogStartOffset = c.logStart(fp.topic.Name)
		if err != nil {
			rp.ErrorCode, rp.RecordBatches = sendErr(err), []byte{}
			continue
		}
		rp.ErrorCode = 0
		if total >= maxBytes && total > 0 {
			msgs = nil
		}
		rp.RecordBatches = encodeRecords(msgs)
		total += len(rp.RecordBatches)
		records += len(msgs)
		if len(msgs) == 0 {
			arrived = append(arrived, ch)
		}
	}
	return total, records, arrived
}

// logStart is the earliest Kafka offset a topic may still hold.
func (c *conn) logStart(topic string) int64 {
	t, err := c.g.cat.Topic(topic)
	if err != nil {
		return -1
	}
	from := time.Unix(0, int64(t.Created))
	if t.Retention > 0 {
		from = later(from, time.Now().Add(-t.Retention))
	}
	return timeOffset(from, t.Params.Grid)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// encodeRecords encodes msgs as v2 batches, one per stripe. The result
// is never nil: a nil record set encodes as null (size -1), which
// librdkafka refuses as a bad message set.
func encodeRecords(msgs []raidq.Message) []byte {
	out := []byte{}
	for start := 0; start < len(msgs); {
		end := start + 1
		for end < len(msgs) && msgs[end].Position.Offset == msgs[start].Position.Offset {
			end++
		}
		out = appendStripe(out, msgs[start:end])
		start = end
	}
	return out
}

func appendStripe(dst []byte, msgs []raidq.Message) []byte {
	base := kafkaOffset(msgs[0].Position)
	spec := kafkawire.BatchSpec{BaseOffset: base, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	for _, m := range msgs {
		ts := m.Time
		if ts.IsZero() {
			ts = m.Position.Time()
		}
		rec := kafkawire.Record{OffsetDelta: int32(kafkaOffset(m.Position) - base), Timestamp: ts.UnixMilli(), Key: m.Key, Value: m.Value}
		for _, h := range m.Headers {
			rec.Headers = append(rec.Headers, kafkawire.Header{Key: h.Name, Value: h.Value})
		}
		spec.Records = append(spec.Records, rec)
	}
	out, err := kafkawire.AppendBatch(dst, spec)
	if err != nil {
		return dst // cannot happen for decoded records within limits; the client re-fetches
	}
	return out
}

// waitAny waits until one of chs is closed (true), or the deadline or ctx.
func waitAny(ctx context.Context, deadline <-chan time.Time, chs []<-chan struct{}) bool {
	if len(chs) == 1 {
		select {
		case <-chs[0]:
			return true
		case <-deadline:
		case <-ctx.Done():
		}
		return false
	}
	one := make(chan struct{}, 1)
	stop := make(chan struct{})
	defer close(stop)
	for _, ch := range chs {
		go func() {
			select {
			case <-ch:
				select {
				case one <- struct{}{}:
				default:
				}
			case <-stop:
			}
		}()
	}
	select {
	case <-one:
		return true
	case <-deadline:
	case <-ctx.Done():
	}
	return false
}
