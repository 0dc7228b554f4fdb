package meta

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestParseGroupKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		ok   bool
		kind byte
	}{
		{"g.billing.orders.m.m-1", true, 'm'}, {"g.billing.orders.p.3", true, 'p'},
		{"g.billing.orders.p.03", false, 0}, {"g.billing.orders.p.-1", false, 0}, {"g.billing.orders.x.1", false, 0},
		{"g.billing.orders.p", false, 0}, {"kgroup.billing", false, 0}, {"lease.fanout.orders.1", false, 0},
	} {
		r, ok := parseGroupKey(tc.key)
		if ok != tc.ok || ok && (r.Kind != tc.kind || r.Group != "billing" || r.Topic != "orders") {
			t.Errorf("%s: %+v %v", tc.key, r, ok)
		}
	}
}

// TestGroupRecordsAndDelete: the listing holds every native record of
// every group (or of one), with revisions, and nothing else of the
// bucket; a delete at a stale revision is fenced, and a group deleted
// record by record is gone.
func TestGroupRecordsAndDelete(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	if recs, err := s.GroupRecords(ctx, ""); err != nil || len(recs) != 0 {
		t.Fatalf("empty bucket: %v %v", recs, err)
	}
	now := time.Now()
	for _, g := range []string{"billing", "audit"} {
		if err := s.GroupHeartbeat(ctx, g, "orders", "m1", now, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CommitPosition(ctx, g, "orders", 0, GroupPosition{Offset: 5, Member: "m1"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutKafkaGroup(ctx, &KafkaGroup{Name: "kafka-app", State: "Empty"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.AcquireLease(ctx, "fanout.orders.0", "n1", time.Second, now); err != nil {
		t.Fatal(err)
	}
	all, err := s.GroupRecords(ctx, "")
	if err != nil || len(all) != 4 {
		t.Fatalf("all groups: %d records, %v", len(all), err)
	}
	recs, err := s.GroupRecords(ctx, "billing")
	if err != nil || len(recs) != 2 {
		t.Fatalf("billing: %+v %v", recs, err)
	}
	for _, r := range recs {
		switch {
		case r.Kind == 'm' && (r.Member != "m1" || r.Beat.Member != "m1" || r.Rev == 0):
			t.Errorf("heartbeat %+v", r)
		case r.Kind == 'p' && (r.Partition != 0 || r.Pos.Offset != 5 || r.Pos.Member != "m1"):
			t.Errorf("position %+v", r)
		}
	}
	beat := recs[0]
	if beat.Kind != 'm' {
		beat = recs[1]
	}
	if err := s.GroupHeartbeat(ctx, "billing", "orders", "m1", now, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteGroupRecord(ctx, beat.Key, beat.Rev); !errors.Is(err, ErrFenced) {
		t.Fatalf("delete at a stale revision: %v, want ErrFenced", err)
	}
	if err := s.DeleteGroupRecord(ctx, "kgroup.kafka-app", 0); err == nil {
		t.Fatal("deleted a Kafka group's record as a native one")
	}
	for _, r := range recs {
		if err := s.DeleteGroupRecord(ctx, r.Key, 0); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := s.GroupRecords(ctx, "billing"); err != nil || len(left) != 0 {
		t.Fatalf("after delete: %v %v", left, err)
	}
	if exists, err := s.NativeGroupExists(ctx, "billing"); err != nil || exists {
		t.Fatalf("billing still exists: %v %v", exists, err)
	}
	if _, err := s.GroupRecords(ctx, "bad.name"); err == nil {
		t.Fatal("listed a group name with a dot")
	}
}

// TestGroupBeatByKey: a member's heartbeat read by key, as a member
// missing from a listing is before it is taken for gone; after it leaves,
// there is none.
func TestGroupBeatByKey(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	if err := s.GroupHeartbeat(ctx, "g", "orders", "m1", time.Now(), 4*time.Second); err != nil {
		t.Fatal(err)
	}
	b, ok, err := s.GroupBeat(ctx, "g", "orders", "m1")
	if err != nil || !ok || b.Session != 4*time.Second || b.Revision == 0 {
		t.Fatalf("beat %+v ok %v err %v", b, ok, err)
	}
	if err := s.LeaveGroup(ctx, "g", "orders", "m1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.GroupBeat(ctx, "g", "orders", "m1"); err != nil || ok {
		t.Fatalf("after leaving: ok %v err %v", ok, err)
	}
	if _, _, err := s.GroupBeat(ctx, "g", "orders", "bad.name"); err == nil {
		t.Fatal("a bad member name was read")
	}
}
