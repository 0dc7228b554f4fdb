package raidq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestGroupAdminResetThenJoin: a group that read everything shows no lag;
// a reset refuses while a member is live, a dry run writes nothing, and
// after an executed reset a member that joins starts exactly at the new
// positions; a stale compare-and-set keeps a concurrent commit; delete
// removes the group. The joining member's lag is exported.
func TestGroupAdminResetThenJoin(t *testing.T) {
	const parts = 2
	lc, _ := groupCluster(t, parts)
	reg := prometheus.NewRegistry()
	c, err := lc.Connect(raidq.WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := produce(t, c, "a", 20, 20, 0)
	after := produce(t, c, "b", 20, 20, 0) // a later producer: its offsets follow every "a"

	first := startMember(t, c, "first", 0, raidq.WithAutoCommit(100*time.Millisecond))
	var lastA uint64
	all := waitMessages(ctx, t, first, len(before)+len(after))
	for _, m := range all {
		if strings.HasPrefix(string(m.Value), "a-") {
			lastA = max(lastA, m.Position.Offset)
		}
	}
	resetAt := time.Unix(0, int64(lastA)+1) // positions are time: just after the last "a"
	// A later producer's offsets follow the earlier one's within a
	// partition, not across partitions (each writer rounds its own clock
	// up to the grid, after its own skew correction): a first "b" may lie
	// a few µs before the last "a" of another partition. Count what lies
	// at or after resetAt.
	var afterReset int
	for _, m := range all {
		if strings.HasPrefix(string(m.Value), "b-") && !m.Position.Time().Before(resetAt) {
			afterReset++
		}
	}
	if afterReset < len(after)/2 {
		t.Fatalf("only %d of %d later records lie after the reset point", afterReset, len(after))
	}
	_, err = c.ResetGroup(ctx, "g", raidq.GroupReset{Topic: "orders", To: raidq.ResetToTime(resetAt), Execute: true})
	if !errors.Is(err, raidq.ErrGroupLive) {
		t.Fatalf("reset with a live member: %v, want ErrGroupLive", err)
	}
	first.halt()
	if err := first.cons.Close(); err != nil {
		t.Fatal(err)
	}
	d := describe(ctx, t, c)
	for _, p := range d.Partitions {
		if !p.Committed || p.Lag != 0 || p.LagRecords != 0 || p.KafkaOffset < 0 {
			t.Fatalf("after reading everything: %+v", p)
		}
	}
	quick := raidq.WithHeartbeatWatch(0) // no member has a record left (Close left the group)
	dry, err := c.ResetGroup(ctx, "g", raidq.GroupReset{Topic: "orders", To: raidq.ResetToTime(resetAt)}, quick)
	if err != nil || len(dry) != parts || dry[0].Written || dry[0].To.Offset != uint64(resetAt.UnixNano()) {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	if again := describe(ctx, t, c); again.Partitions[0].Position != d.Partitions[0].Position {
		t.Fatalf("the dry run moved partition 0: %v -> %v", d.Partitions[0].Position, again.Partitions[0].Position)
	}
	rs, err := c.ResetGroup(ctx, "g", raidq.GroupReset{Topic: "orders", To: raidq.ResetToTime(resetAt), Execute: true}, quick)
	if err != nil || !rs[0].Written || !rs[1].Written {
		t.Fatalf("reset: %+v %v", rs, err)
	}
	if d := describe(ctx, t, c); d.Partitions[0].LagRecords+d.Partitions[1].LagRecords != int64(afterReset) {
		t.Fatalf("after the reset the lag should count the %d records after it: %+v", afterReset, d.Partitions)
	}

	joined := startMember(t, c, "joined", 0)
	got := waitMessages(ctx, t, joined, afterReset)
	for _, m := range got {
		if !strings.HasPrefix(string(m.Value), "b-") || m.Position.Time().Before(resetAt) {
			t.Fatalf("a member joining after the reset got %s at %v (reset to %v)", m.Value, m.Position.Time(), resetAt)
		}
	}
	checkLag(ctx, t, joined.cons, reg)
	joined.halt()
	_ = joined.cons.Close()

	checkStaleReset(ctx, t, c, lc.Meta())
	n, err := c.DeleteGroup(ctx, "g", quick)
	if err != nil || n != parts {
		t.Fatalf("delete: %d records, %v", n, err)
	}
	if _, err := c.DescribeGroup(ctx, "g", quick); !errors.Is(err, raidq.ErrUnknownGroup) {
		t.Fatalf("describe after delete: %v, want ErrUnknownGroup", err)
	}
}

func describe(ctx context.Context, t *testing.T, c *raidq.Client) raidq.GroupDescription {
	t.Helper()
	d, err := c.DescribeGroup(ctx, "g", raidq.WithHeartbeatWatch(0), raidq.WithLagScan(1000, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitMessages waits until m has received n messages and returns them.
func waitMessages(ctx context.Context, t *testing.T, m *member, n int) []raidq.Message {
	t.Helper()
	for {
		if got := m.messages(); len(got) >= n {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("member %s got %d messages, want %d", m.name, len(m.messages()), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkLag: the member reports its partitions' lag, and the gauge has a
// series for each with the group's label.
func checkLag(ctx context.Context, t *testing.T, cons *raidq.Consumer, reg *prometheus.Registry) {
	t.Helper()
	for len(cons.Lag()) == 0 || cons.Lag()[0].Behind > 5*time.Second {
		select {
		case <-ctx.Done():
			t.Fatalf("a group member's lag: %+v", cons.Lag())
		case <-time.After(20 * time.Millisecond):
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "raidq_consumer_lag_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["group"] == "g" && labels["topic"] == "orders" {
				return
			}
		}
	}
	t.Fatal("no raidq_consumer_lag_seconds series for group g")
}

// checkStaleReset: a reset whose read predates a commit is fenced and
// keeps the commit.
func checkStaleReset(ctx context.Context, t *testing.T, c *raidq.Client, store *meta.Store) {
	t.Helper()
	pos, rev, err := store.Position(ctx, "g", "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	pos.Offset++
	if _, err := store.CommitPosition(ctx, "g", "orders", 0, pos, rev); err != nil {
		t.Fatal(err)
	}
	err = c.ResetAtRevisionsForTest(ctx, "g", "orders", raidq.Position{Offset: 1}, map[int]uint64{0: rev})
	if !errors.Is(err, raidq.ErrFenced) {
		t.Fatalf("reset at a stale revision: %v, want ErrFenced", err)
	}
	if now, _, err := store.Position(ctx, "g", "orders", 0); err != nil || now.Offset != pos.Offset {
		t.Fatalf("the concurrent commit was overwritten: %+v %v", now, err)
	}
}

// ExampleConsumer_Lag shows how far a group member's partitions trail
// the readable frontier (now minus the topic's read delay), and where a
// reset would move the group.
func ExampleConsumer_Lag() {
	lc, stop, err := localCluster()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	if err := lc.CreateTopic("orders", 2, quorum.Default()); err != nil {
		fmt.Println(err)
		return
	}
	c, err := lc.Connect()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	cons, err := c.Consumer("orders", raidq.WithGroup("billing"), raidq.WithAutoCommit(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cons.Close()
	// Wait until the member owns both partitions and has read up to the frontier.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if l := cons.Lag(); len(l) == 2 && l[0].Behind < time.Second && l[1].Behind < time.Second {
			break
		}
	}
	for _, l := range cons.Lag() {
		fmt.Printf("partition %d: less than a second behind: %v\n", l.Partition, l.Behind < time.Second)
	}
	// Output:
	// partition 0: less than a second behind: true
	// partition 1: less than a second behind: true
}
