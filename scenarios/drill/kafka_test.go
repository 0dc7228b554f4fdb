package drill

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestClassifyKafka(t *testing.T) {
	for _, c := range []struct {
		err     error
		cls     string
		unknown bool
	}{
		{kgo.ErrRecordTimeout, "timeout", true},
		{fmt.Errorf("x: %w", kgo.ErrClientClosed), "closed", true},
		{kerr.NotEnoughReplicas, "not_enough_nodes", false},
		{kerr.RequestTimedOut, "timeout", true},
		{kerr.InvalidRecord, "kafka_invalid_record", false},
		{kerr.LeaderNotAvailable, "kafka_leader_not_available", true},
		{kerr.TopicAuthorizationFailed, "kafka_topic_authorization_failed", false},
		{errors.New("boom"), "other", true},
	} {
		cls, unknown := classifyKafka(c.err)
		if cls != c.cls || unknown != c.unknown {
			t.Errorf("%v: %s %v, want %s %v", c.err, cls, unknown, c.cls, c.unknown)
		}
	}
}

// TestKafkaStripes: an acked Kafka record takes the stripe id the
// read-back delivered it in, at its acked position when there is one.
func TestKafkaStripes(t *testing.T) {
	h := newHistory(time.Now(), 1)
	for range 3 {
		h.attempt(0, time.Now())
	}
	off, idx := kafkaPosition(5*1024 + 3)
	if off != 5*1024 || idx != 3 {
		t.Fatalf("position %d %d", off, idx)
	}
	h.kafkaOutcome(0, 0, &kgo.Record{Partition: 1, Offset: 5*1024 + 3}, nil)
	h.kafkaOutcome(0, 1, &kgo.Record{Partition: 1, Offset: 6 * 1024}, nil)
	h.kafkaOutcome(0, 2, nil, kerr.NotEnoughReplicas)
	r := &run{hist: h}
	dels := []delivery{
		{known: true, prod: 0, seq: 0, part: 1, off: 9 * 1024, stripe: "elsewhere"},
		{known: true, prod: 0, seq: 0, part: 1, off: 5 * 1024, idx: 3, stripe: "at-ack"},
		{known: true, prod: 0, seq: 1, part: 1, off: 7 * 1024, stripe: "moved"},
	}
	if n := r.kafkaStripes(dels); n != 1 {
		t.Errorf("%d mismatches, want 1", n)
	}
	recs := r.sends()[0]
	if recs[0].stripe != "at-ack" || recs[1].stripe != "moved" || recs[2].status != statusFailed {
		t.Errorf("records %+v", recs)
	}
}
