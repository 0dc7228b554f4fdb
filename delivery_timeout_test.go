package raidq_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/scenarios/localtest"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestDeliveryTimeout: with three of six nodes down no stripe can commit.
// A producer with a delivery timeout keeps retrying, so a send made
// during the outage is acked once a node is back; without one the send
// fails after its 16 attempts, naming the nodes.
func TestDeliveryTimeout(t *testing.T) {
	lc, c := localtest.Start(t, server.LocalClusterConfig{Logger: testkit.Logger(t, slog.LevelError), NoSync: true}, 1)
	for _, i := range []int{1, 3, 5} {
		if err := lc.KillNode(i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	quick, err := c.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := quick.Send(ctx, raidq.Message{Value: []byte("quick")}); !errors.Is(err, core.ErrNotEnoughNodes) && !errors.Is(err, core.ErrTimeout) {
		t.Fatalf("send with three nodes down and no delivery timeout: %v, want a failure", err)
	}

	patient, err := c.Producer("orders", raidq.WithDeliveryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := patient.Send(ctx, raidq.Message{Value: []byte("patient")})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("send returned with three nodes down and a 30s delivery timeout: %v", err)
	case <-time.After(3 * time.Second): // past the 16 quick attempts (about 2s)
	}
	if err := lc.RestartNode(3); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("send after a node came back: %v", err)
	}
	t.Logf("acked %s after the send, once a fourth node was back", time.Since(start).Round(time.Millisecond))
}
