package meta

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raidq/raidq/stripe/quorum"
)

func ptr[T any](v T) *T { return &v }

func testRecord(t *testing.T) TopicRecord {
	t.Helper()
	p := quorum.Default()
	r := TopicRecord{Name: "orders", Partitions: 1, N: p.N, K: p.K, W: p.W, ReadDelay: Duration(p.ReadDelay),
		AcceptWindow: Duration(p.AcceptWindow), FutureBound: Duration(p.FutureBound), MaxSkew: Duration(p.MaxSkew),
		Grid: p.Grid, Ensembles: [][]string{{"a", "b", "c", "d", "e", "f"}}, Created: 1}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPlanAlterOrder: the accept window changes by offset, one change at a
// time, and D never goes below a window in force: lowering both takes two
// changes, the second after the first is in force.
func TestPlanAlterOrder(t *testing.T) {
	now := time.Unix(1000, 0)
	cur := testRecord(t)
	if _, err := PlanAlter(cur, TopicChange{}, now); !errors.Is(err, ErrAlter) {
		t.Fatalf("empty change: %v", err)
	}
	low := 20 * time.Millisecond
	if _, err := PlanAlter(cur, TopicChange{AcceptWindow: &low, ReadDelay: &low}, now); !errors.Is(err, ErrAlterOrder) {
		t.Fatalf("A and D lowered together: want ErrAlterOrder, got %v", err)
	}
	r, err := PlanAlter(cur, TopicChange{AcceptWindow: &low}, now)
	if err != nil {
		t.Fatal(err)
	}
	plan := r.AcceptPlan()
	if plan.Prev != int64(250*time.Millisecond) || plan.Next != int64(low) || int64(plan.From) < now.UnixNano()+quorum.AlterLead {
		t.Fatalf("plan %+v", plan)
	}
	if _, err := PlanAlter(r, TopicChange{AcceptWindow: ptr(50 * time.Millisecond)}, now); !errors.Is(err, ErrAlterPending) {
		t.Fatalf("second change before the first is in force: want ErrAlterPending, got %v", err)
	}
	if _, err := PlanAlter(r, TopicChange{ReadDelay: &low}, now); !errors.Is(err, ErrAlterOrder) {
		t.Fatalf("D below the old window still in force: want ErrAlterOrder, got %v", err)
	}
	later := SettleTime(r)
	r2, err := PlanAlter(r, TopicChange{ReadDelay: &low}, later)
	if err != nil {
		t.Fatalf("D lowered once the window is in force: %v", err)
	}
	if r2.AcceptFrom != 0 || r2.PrevAcceptWindow != 0 || r2.ReadDelay != Duration(low) {
		t.Fatalf("settled plan not dropped: %+v", r2)
	}
	if _, err := PlanAlter(r2, TopicChange{AcceptWindow: ptr(time.Second)}, later); !errors.Is(err, quorum.ErrInvalidParams) {
		t.Fatalf("A above D: want the D >= A rule, got %v", err)
	}
	if _, err := PlanAlter(r2, TopicChange{Retention: ptr(-time.Second)}, later); err == nil {
		t.Fatal("negative retention accepted")
	}
}

// TestAlterTopicAndAddPartitions on embedded JetStream: the change lands
// by compare-and-set and the catalog watch delivers it; added partitions
// keep the old ensembles.
func TestAlterTopicAndAddPartitions(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	now := time.Now()
	addMembers(t, s, 7, now)
	if _, err := s.CreateTopic(ctx, TopicSpec{Name: "orders", Partitions: 2, Params: quorum.Default()}, now); err != nil {
		t.Fatal(err)
	}
	cat, err := s.WatchCatalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	r, err := s.AlterTopic(ctx, "orders", TopicChange{Retention: ptr(time.Hour), ReadDelay: ptr(time.Second),
		AcceptWindow: ptr(500 * time.Millisecond)}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Retention != Duration(time.Hour) || r.AcceptFrom == 0 {
		t.Fatalf("altered record %+v", r)
	}
	before := r.Ensembles
	r, err = s.AddPartitions(ctx, "orders", 4, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Partitions != 4 || len(r.Ensembles) != 4 || r.Ensembles[0][0] != before[0][0] || r.Ensembles[1][5] != before[1][5] {
		t.Fatalf("partitions added badly: %+v", r.Ensembles)
	}
	if _, err := s.AddPartitions(ctx, "orders", 3, time.Now()); !errors.Is(err, ErrAlter) {
		t.Fatalf("fewer partitions: want ErrAlter, got %v", err)
	}
	if _, err := s.AlterTopic(ctx, "nope", TopicChange{Retention: ptr(time.Hour)}, time.Now); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("unknown topic: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tp, err := cat.Topic("orders"); err == nil && tp.Partitions == 4 && tp.Accept.From == r.AcceptFrom {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the catalog watch never delivered the change")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
