package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/scenarios/localtest"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestClusterKillTwoLosesNothing is the in-process integration test of
// issue 2: six nodes over real NATS, LevelDB and actors; two are killed
// mid-run; every acknowledged message is consumed back.
func TestClusterKillTwoLosesNothing(t *testing.T) {
	log := testkit.Logger(t, slog.LevelWarn)
	lc, c := localtest.Start(t, server.LocalClusterConfig{Logger: log}, 2)
	start := time.Now()
	p, err := c.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	const total = 4000
	var mu sync.Mutex
	acked := make(map[string]bool)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < total; i++ {
		if i == total/2 {
			if err := p.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			_ = lc.KillNode(1)
			_ = lc.KillNode(4)
		}
		wg.Add(1)
		v := fmt.Sprintf("m-%d", i)
		p.Produce(context.Background(), raidq.Message{Value: []byte(v)}, func(m raidq.Message, err error) {
			defer wg.Done()
			if err != nil {
				failed.Add(1)
				return
			}
			mu.Lock()
			acked[v] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Errorf("%d sends failed with two of six nodes down", f)
	}
	cons, err := c.Consumer("orders", raidq.WithStart(start))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := make(map[string]int)
	deadline := time.After(30 * time.Second)
	for len(got) < len(acked) {
		select {
		case m := <-cons.Messages():
			got[string(m.Value)]++
		case <-deadline:
			t.Fatalf("consumed %d of %d acked messages", len(got), len(acked))
		}
	}
	for v := range acked {
		if got[v] == 0 {
			t.Errorf("acked %s never delivered", v)
		}
	}
	for v, n := range got {
		if n > 1 {
			t.Errorf("%s delivered %d times", v, n)
		}
	}
}
