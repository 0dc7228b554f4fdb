package demo

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/raidq/raidq/scenarios/testkit"
)

func TestDemoKillTwo(t *testing.T) {
	r, err := Run(context.Background(), Config{Messages: 2000, Kill: 2, Size: 256, Logger: testkit.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *r)
	if !r.OK || r.Lost != 0 || r.Unexpected != 0 || r.Acked != 2000 || r.Failed != 0 || len(r.Killed) != 2 {
		t.Fatalf("kill 2: %+v", *r)
	}
}

func TestDemoKillThreeFailsClearlyLosesNothing(t *testing.T) {
	r, err := Run(context.Background(), Config{Messages: 2000, Kill: 3, Size: 256, Logger: testkit.Logger(t, slog.LevelError)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *r)
	if r.Lost != 0 || r.Unexpected != 0 || !r.OK {
		t.Fatalf("kill 3 lost acked data: %+v", *r)
	}
	if r.Failed == 0 || !strings.Contains(r.FirstError, "not enough nodes") {
		t.Fatalf("kill 3: want failed sends naming the cause, got failed=%d err=%q", r.Failed, r.FirstError)
	}
	if len(r.Restarted) != 3 {
		t.Fatalf("kill 3: killed nodes should be restarted before consuming, got %v", r.Restarted)
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, c := range []Config{{Messages: 0, Size: 100}, {Messages: 10, Size: 1}, {Messages: 10, Size: 100, Kill: 5, Slow: 3}, {Messages: 10, Size: 100, Nodes: 3}} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
