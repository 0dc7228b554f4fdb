package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/kafka"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// A coalesced stripe of an idempotent producer's sequences 0..3, then a
// retry of the batch at sequences 2..3 written alone (as another gateway
// would, after this one died unanswered): readers deliver each sequence
// once.
func TestCoalescedRetryDeliveredOnce(t *testing.T) {
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), NoSync: true, Logger: testkit.Logger(t, 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	if err := lc.CreateTopic("orders", 1, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	c, err := lc.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	p, err := c.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	msgs := func(from, n int) []raidq.Message {
		var out []raidq.Message
		for i := from; i < from+n; i++ {
			out = append(out, raidq.Message{Value: []byte(fmt.Sprint("seq", i))})
		}
		return out
	}
	if _, err := p.SendBatch(ctx, 0, msgs(0, 4), raidq.WithStripe(kafka.KafkaStripe(42, 0, 0, 0, 0))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendBatch(ctx, 0, msgs(2, 2), raidq.WithStripe(kafka.KafkaStripe(42, 0, 0, 2, 0))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendBatch(ctx, 0, msgs(4, 1), raidq.WithStripe(kafka.KafkaStripe(42, 0, 0, 4, 0))); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Consumer("orders", raidq.WithStart(start.Add(-time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]int{}
	for len(seen) < 5 {
		m, err := cons.Next(ctx)
		if err != nil {
			t.Fatalf("read %v: %v", seen, err)
		}
		seen[string(m.Value)]++
	}
	// Everything is read; nothing more may come (wait past the next scans).
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if m, err := cons.Next(wctx); err == nil {
		t.Fatalf("read %q again after %v", m.Value, seen)
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("%s delivered %d times", v, n)
		}
	}
}
