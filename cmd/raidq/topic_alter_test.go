package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestTopicAlterAgainstDev runs create --json, alter and add-partitions
// against a `raidq dev` cluster, as an operator would.
func TestTopicAlterAgainstDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raidq dev cluster")
	}
	url, _ := startDev(t, testBinary(t))
	cli := func(args ...string) (string, string, int) { return runCLI(append(args, "--nats", url)...) }

	out, errOut, code := cli("topic", "create", "orders", "--json")
	var r meta.TopicRecord
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Name != "orders" || r.Partitions != 1 {
		t.Fatalf("create --json: code %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("topic", "alter", "orders", "--retention", "1h"); code != 0 || !strings.Contains(out, "retention 1h0m0s") {
		t.Fatalf("alter --retention: code %d, %q %q", code, out, errOut)
	}
	// Lowering A and D together must wait for A: refused as one change
	// (--wait=false; TestTopicAlterLatencySteps runs both steps).
	if out, errOut, code = cli("topic", "alter", "orders", "--latency", "low", "--wait=false"); code != exitRefused || !strings.Contains(errOut, "lower the accept window first") {
		t.Fatalf("alter --latency low --wait=false: code %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("topic", "alter", "orders", "--accept-window", "100ms", "--json"); code != 0 {
		t.Fatalf("alter --accept-window: code %d, %q %q", code, out, errOut)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.AcceptFrom == 0 || r.PrevAcceptWindow == 0 {
		t.Fatalf("alter --json shows no pending change: %v %q", err, out)
	}
	if out, errOut, code = cli("topic", "alter", "orders", "--accept-window", "200ms"); code != exitRefused || !strings.Contains(errOut, "still taking effect") {
		t.Fatalf("second change of A before the first is in force: code %d, %q %q", code, out, errOut)
	}
	if out, _, _ = cli("topic", "describe", "orders"); !strings.Contains(out, "accept change  250ms for offsets before") {
		t.Fatalf("describe does not show the pending change:\n%s", out)
	}
	if out, errOut, code = cli("topic", "alter", "orders"); code != exitUsage {
		t.Fatalf("alter with nothing to change: code %d, %q %q", code, out, errOut)
	}
	out, errOut, code = cli("topic", "add-partitions", "orders", "--count", "3")
	if code != 0 || !strings.Contains(out, "3 partitions (was 1)") || !strings.Contains(errOut, "WARNING: keyed messages") {
		t.Fatalf("add-partitions: code %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("topic", "add-partitions", "orders", "--count", "2"); code != exitRefused {
		t.Fatalf("add-partitions to fewer: code %d, %q %q", code, out, errOut)
	}
}

// TestTopicAlterUnderLoad lowers a live topic's accept window while a
// producer sends and a group member reads, through a `raidq dev` process:
// the switch lands mid-stream (AlterLead after the change), and every
// acked message is delivered once.
func TestTopicAlterUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raidq dev cluster and runs for about 25 s")
	}
	url, _ := startDev(t, testBinary(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createTopic(ctx, t, url, "live", 2)
	c, err := raidq.Connect(url, raidq.WithLogger(testkit.Logger(t, slog.LevelWarn)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitTopic(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Consumer("live", raidq.WithGroup("g"), raidq.WithStart(time.Unix(0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := make(chan string, 1<<16)
	go func() {
		for {
			m, err := cons.Next(ctx)
			if err != nil {
				return
			}
			got <- string(m.Value)
		}
	}()
	acked := produceWhile(ctx, t, c, "live", func(elapsed time.Duration) {
		if elapsed == 2*time.Second {
			in, err := c.AlterTopic(ctx, "live", raidq.TopicChange{AcceptWindow: ptrTo(100 * time.Millisecond)})
			if err != nil {
				t.Errorf("alter: %v", err)
				return
			}
			t.Logf("accept window 250ms -> 100ms for offsets from %s", in.AcceptFrom.UTC().Format(time.RFC3339))
		}
	}, raidq.AlterLead+6*time.Second)
	seen := make(map[string]int)
	deadline := time.After(30 * time.Second)
	for len(seen) < len(acked) {
		select {
		case v := <-got:
			seen[v]++
		case <-deadline:
			t.Fatalf("%d of %d acked messages delivered", len(seen), len(acked))
		}
	}
	for v, n := range seen {
		if n != 1 || !acked[v] {
			t.Fatalf("message %s delivered %d times (acked: %v)", v, n, acked[v])
		}
	}
}

// produceWhile sends a message every 5 ms for d, calling at(elapsed) on
// each whole second, and returns the acked values.
func produceWhile(ctx context.Context, t *testing.T, c *raidq.Client, topic string, at func(time.Duration), d time.Duration) map[string]bool {
	t.Helper()
	p, err := c.Producer(topic)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	acked := make(map[string]bool)
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	next := time.Second
	for i := 0; time.Since(start) < d; i++ {
		<-tick.C
		if e := time.Since(start); e >= next {
			at(next)
			next += time.Second
		}
		v := fmt.Sprintf("m%06d", i)
		if _, err := p.Send(ctx, raidq.Message{Value: []byte(v)}); err != nil {
			t.Fatalf("send %s: %v", v, err)
		}
		acked[v] = true
	}
	return acked
}

func ptrTo[T any](v T) *T { return &v }
