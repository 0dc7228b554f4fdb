package raidq

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/raidq/raidq/bus/meta"
)

// ResetAtRevisionsForTest writes a reset of topic's partitions to `to`
// as if their records had been read at revs (a stale read), so a test can
// check that a concurrent commit is not overwritten.
func (c *Client) ResetAtRevisionsForTest(ctx context.Context, group, topic string, to Position, revs map[int]uint64) error {
	rs := make([]PartitionReset, 0, len(revs))
	recs := make(map[int]meta.GroupRecord, len(revs))
	for p, rev := range revs {
		rs = append(rs, PartitionReset{Topic: topic, Partition: p, To: to})
		recs[p] = meta.GroupRecord{Rev: rev}
	}
	return c.writeResets(ctx, group, rs, recs, time.Now())
}

func TestParseResetTo(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, tc := range []struct {
		in   string
		want ResetTo
	}{
		{"earliest", ResetEarliest()}, {"latest", ResetLatest()}, {"-10m", ResetAgo(10 * time.Minute)},
		{"2026-01-02T03:04:05.000000006Z", ResetToTime(at)},
	} {
		got, err := ParseResetTo(tc.in)
		if err != nil || got.kind != tc.want.kind || !got.t.Equal(tc.want.t) || got.ago != tc.want.ago {
			t.Errorf("ParseResetTo(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back, err := ParseResetTo(got.String()); err != nil || back != got {
			t.Errorf("%q prints as %q, which reads back as %+v, %v", tc.in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "10m", "-0s", "-x", "yesterday", "2026-01-02"} {
		if _, err := ParseResetTo(bad); !errors.Is(err, ErrBadReset) {
			t.Errorf("ParseResetTo(%q): %v, want ErrBadReset", bad, err)
		}
	}
}

func TestResetResolve(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	created := uint64(now.Add(-time.Hour).UnixNano())
	tt := topicTimes{created: created, readDelay: 250 * time.Millisecond}
	ns := func(d time.Duration) uint64 { return uint64(now.Add(d).UnixNano()) }
	for _, tc := range []struct {
		to   ResetTo
		tt   topicTimes
		want uint64
	}{
		{ResetEarliest(), tt, created},
		{ResetEarliest(), topicTimes{created: created, retention: 10 * time.Minute}, ns(-10 * time.Minute)},
		{ResetEarliest(), topicTimes{created: created, retention: 2 * time.Hour}, created},
		{ResetLatest(), tt, ns(-250 * time.Millisecond)},
		{ResetAgo(10 * time.Minute), tt, ns(-10 * time.Minute)},
		{ResetAgo(2 * time.Hour), tt, created}, // nothing before the topic
		{ResetToTime(now.Add(-time.Minute)), tt, ns(-time.Minute)},
		{ResetToTime(now), tt, ns(0)},
	} {
		got, err := tc.to.resolve(now, tc.tt)
		if err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.to, got, err, tc.want)
		}
	}
	for _, bad := range []ResetTo{{}, ResetToTime(now.Add(time.Second)), ResetAgo(0)} {
		if _, err := bad.resolve(now, tt); !errors.Is(err, ErrBadReset) {
			t.Errorf("%s: %v, want ErrBadReset", bad, err)
		}
	}
}

func TestPartitionLag(t *testing.T) {
	const head = 100 * uint64(time.Second)
	sec := func(n int64) uint64 { return uint64(n) * uint64(time.Second) }
	for _, tc := range []struct {
		name      string
		committed uint64
		scan      *lagScan
		lag       time.Duration
		records   int64
		atLeast   bool
	}{
		{"no scan: head minus position", sec(40), nil, 60 * time.Second, -1, false},
		{"position past head", sec(101), nil, 0, -1, false},
		{"caught up though old", sec(40), &lagScan{done: true}, 0, 0, false},
		{"oldest unread record", sec(40), &lagScan{done: true, first: sec(90), records: 3}, 10 * time.Second, 3, false},
		{"stopped at the limit", sec(40), &lagScan{first: sec(50), records: 10}, 50 * time.Second, 10, true},
		{"stopped with nothing seen", sec(40), &lagScan{}, 60 * time.Second, -1, false},
	} {
		lag, n, atLeast := partitionLag(head, tc.committed, tc.scan)
		if lag != tc.lag || n != tc.records || atLeast != tc.atLeast {
			t.Errorf("%s: %v %d %v; want %v %d %v", tc.name, lag, n, atLeast, tc.lag, tc.records, tc.atLeast)
		}
	}
	if d := behindHead(time.Unix(10, 0), time.Second, time.Unix(7, 0)); d != 2*time.Second {
		t.Errorf("behindHead: %v, want 2s", d)
	}
	if d := behindHead(time.Unix(10, 0), time.Second, time.Unix(9, 5)); d != 0 {
		t.Errorf("behindHead caught up: %v, want 0", d)
	}
}

func TestLiveMembers(t *testing.T) {
	before := map[string]uint64{"o/a": 1, "o/b": 5, "o/gone": 7}
	after := map[string]uint64{"o/a": 2, "o/b": 5, "o/new": 9}
	live := liveMembers(before, after)
	if !live["o/a"] || live["o/b"] || !live["o/new"] || live["o/gone"] || len(live) != 2 {
		t.Fatalf("live %v: want a (advanced) and new (joined), not b (stale) or gone (left)", live)
	}
	if unwatched := liveMembers(before, nil); len(unwatched) != 3 {
		t.Fatalf("without a watch every recorded member counts as live: %v", unwatched)
	}
}

func TestKafkaOffsets(t *testing.T) {
	p := Position{Offset: 1_700_000_000_000_001_024, Index: 7}
	if o := kafkaOffset(p, 1024); o != 1_700_000_000_000_001_031 {
		t.Fatalf("kafkaOffset %d", o)
	}
	if o := kafkaOffset(p, 0); o != -1 {
		t.Fatalf("no grid: %d, want -1", o)
	}
	if back := kafkaPosition(kafkaOffset(p, 1024), 1024); back != p {
		t.Fatalf("kafkaPosition %v, want %v", back, p)
	}
	if z := kafkaPosition(-1, 1024); z != (Position{}) {
		t.Fatalf("kafkaPosition(-1) %v", z)
	}
}

// consumerAssignment encodes a consumer protocol assignment v0 (the
// layout kmsg.ConsumerMemberAssignment writes).
func consumerAssignment(topics map[string][]int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(topics)))
	for topic, ps := range topics {
		b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
		b = append(b, topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
		for _, p := range ps {
			b = binary.BigEndian.AppendUint32(b, uint32(p))
		}
	}
	return binary.BigEndian.AppendUint32(b, 0xffffffff) // null user data
}

func TestKafkaAssignment(t *testing.T) {
	a, err := kafkaAssignment(consumerAssignment(map[string][]int32{"orders": {0, 2}}))
	if err != nil || len(a["orders"]) != 2 || a["orders"][1] != 2 {
		t.Fatalf("%v %v", a, err)
	}
	good := consumerAssignment(map[string][]int32{"orders": {0, 2}})
	for n := 0; n < len(good)-4; n++ {
		if _, err := kafkaAssignment(good[:n]); err == nil && n < 6 {
			t.Errorf("%d bytes decoded", n)
		}
	}
	if _, err := kafkaAssignment([]byte{0, 9, 0, 0, 0, 0}); err == nil {
		t.Error("version 9 decoded")
	}
	kg := meta.KafkaGroup{Name: "k", ProtocolType: "consumer", Members: []meta.KafkaMember{
		{ID: "m1", Assignment: consumerAssignment(map[string][]int32{"orders": {1}})}, {ID: "m2", Assignment: []byte{1}}}}
	if o := kafkaOwners(kg); o["orders"][1] != "m1" || len(o["orders"]) != 1 {
		t.Fatalf("owners %v", o)
	}
}

func TestResetPartitions(t *testing.T) {
	if ps, err := resetPartitions(nil, 3); err != nil || len(ps) != 3 || ps[2] != 2 {
		t.Fatalf("all: %v %v", ps, err)
	}
	if ps, err := resetPartitions([]int{2, 0, 2}, 3); err != nil || len(ps) != 2 || ps[0] != 0 {
		t.Fatalf("some: %v %v", ps, err)
	}
	if _, err := resetPartitions([]int{3}, 3); !errors.Is(err, ErrBadReset) {
		t.Fatalf("out of range: %v", err)
	}
}
