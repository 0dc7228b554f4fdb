package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
)

// Kafka offsets (docs/design.md#kafka-offsets). A gridded topic's stripe
// offsets are multiples of its grid G and a stripe holds at most G
// records, so offset + record index is an int64 that grows in delivery
// order and is unique: that sum is the Kafka offset. It is (almost)
// nanoseconds since the epoch, so lag in these units is about how far
// behind in time a consumer is, not a count of records.

// kafkaOffset is the Kafka offset of a position.
func kafkaOffset(p raidq.Position) int64 { return int64(p.Offset) + int64(p.Index) }

// position splits a Kafka offset of a topic with grid g into the stripe
// offset and record index it names (g > 1).
func position(off int64, g uint64) raidq.Position {
	if off < 0 {
		off = 0
	}
	u := uint64(off)
	return raidq.Position{Offset: u &^ (g - 1), Index: uint32(u & (g - 1))}
}

// timeOffset is the first Kafka offset at or after t on grid g.
func timeOffset(t time.Time, g uint64) int64 {
	ns := t.UnixNano()
	if ns < 0 {
		return 0
	}
	u := uint64(ns)
	return int64((u + g - 1) &^ (g - 1))
}

// Special timestamps of ListOffsets.
const (
	listLatest       = -1
	listEarliest     = -2
	listMaxTimestamp = -3
)

// listOffsetsAtOnce bounds the partitions of one ListOffsets request
// looked up at once (kadm asks for every partition of every topic).
const listOffsetsAtOnce = 16

// listOffsets answers earliest (the topic's creation or retention
// floor), latest (the offset after the last record below the read
// frontier, the partition's tail: tail.go) and by timestamp (the first
// offset at or after it, since offsets are time). A timestamp in the
// future has no offset yet (-1), as in Kafka.
func (c *conn) listOffsets(ctx context.Context, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	now := time.Now()
	sem := make(chan struct{}, listOffsetsAtOnce)
	var wg sync.WaitGroup
	resp.Topics = make([]kmsg.ListOffsetsResponseTopic, len(r.Topics))
	for i, t := range r.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(t.Partitions))
		for j, p := range t.Partitions {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Timestamp, rp.Offset, rp.LeaderEpoch = p.Partition, -1, -1, 0
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				rp.ErrorCode = c.listOffset(ctx, t.Topic, p.Partition, p.Timestamp, now, rp)
			}()
		}
	}
	wg.Wait()
	return resp
}

func (c *conn) listOffset(ctx context.Context, topic string, part int32, ts int64, now time.Time, rp *kmsg.ListOffsetsResponseTopicPartition) int16 {
	if !c.allowed(OpDescribe, topic) && !c.allowed(OpConsume, topic) {
		return kerr.TopicAuthorizationFailed.Code
	}
	t, err := c.g.cat.Topic(topic)
	if err != nil || part < 0 || int(part) >= t.Partitions {
		return kerr.UnknownTopicOrPartition.Code
	}
	g := t.Params.Grid
	if !t.Params.Gridded() {
		return kerr.InvalidTopicException.Code
	}
	switch ts {
	case listLatest, listMaxTimestamp:
		latest, err := c.g.tails.latest(ctx, t, int(part), pollFor(t))
		if err != nil {
			return kerr.OffsetNotAvailable.Code
		}
		rp.Offset = latest
	case listEarliest:
		rp.Offset = c.logStart(topic)
	default:
		if ts < 0 {
			return kerr.InvalidRequest.Code
		}
		at := time.UnixMilli(ts)
		if at.After(now) {
			return 0 // no offset yet
		}
		rp.Offset = max(timeOffset(at, g), c.logStart(topic))
		rp.Timestamp = ts
	}
	return 0
}
