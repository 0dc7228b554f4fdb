package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// cancelOn is a writer that calls cancel once what was written contains
// mark (the command's own progress line: no timing assumed).
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	mark   string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.cancel != nil && strings.Contains(w.buf.String(), w.mark) {
		w.cancel()
	}
	return len(p), nil
}

func (w *cancelOn) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestTopicAlterLatencySteps: `topic alter --latency low` lowers the
// accept window, waits until it is in force, then lowers the read delay,
// printing each step; interrupted during the wait it keeps the first step,
// consistent (the read delay still covers every window in force), and says
// how to finish; --wait=false sends one change, refused.
func TestTopicAlterLatencySteps(t *testing.T) {
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), Logger: testkit.Logger(t, slog.LevelWarn),
		Cluster: "alter", Listen: "127.0.0.1:-1", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	for _, topic := range []string{"both", "half"} {
		if err := lc.CreateTopic(topic, 1, quorum.Default()); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"--nats", lc.ClientURL(), "--cluster", "alter", "--timeout", "20s"}
	low, err := raidq.ProfileParams("low")
	if err != nil {
		t.Fatal(err)
	}
	def := raidq.DefaultParams()

	if _, errOut, code := runCLI(append([]string{"topic", "alter", "both", "--latency", "low", "--wait=false"}, flags...)...); code != exitRefused ||
		!strings.Contains(errOut, "lower the accept window first") {
		t.Fatalf("--wait=false: exit %d %q, want a refusal", code, errOut)
	}

	out, errOut, code := runCLI(append([]string{"topic", "alter", "both", "--latency", "low"}, flags...)...)
	if code != exitOK || !strings.Contains(errOut, "step 1 of 2") || !strings.Contains(errOut, "step 2 of 2: waiting") ||
		!strings.Contains(out, "read delay "+low.ReadDelay.String()+", accept window "+low.AcceptWindow.String()) {
		t.Fatalf("alter --latency low: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &cancelOn{mark: "step 2 of 2: waiting", cancel: cancel}
	var stdout bytes.Buffer
	root := newRoot()
	root.SetArgs(append([]string{"topic", "alter", "half", "--latency", "low"}, flags...))
	root.SetOut(&stdout)
	root.SetErr(stderr)
	err = root.ExecuteContext(ctx)
	if err == nil || exitCode(err) != exitFailure || !strings.Contains(err.Error(), "step 1 stands") ||
		!strings.Contains(err.Error(), "raidq topic alter half --read-delay "+low.ReadDelay.String()) {
		t.Fatalf("interrupted between the steps: %v (exit %d)\nstderr %s", err, exitCode(err), stderr)
	}
	c, err := lc.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tctx, tcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer tcancel()
	info, err := c.Topic(tctx, "half")
	if err != nil {
		t.Fatal(err)
	}
	if info.Params.AcceptWindow != low.AcceptWindow || info.Params.ReadDelay != def.ReadDelay || info.PrevAcceptWindow > info.Params.ReadDelay {
		t.Fatalf("after the interrupt: accept window %v (was %v), read delay %v; want the first step only, the read delay covering both windows",
			info.Params.AcceptWindow, info.PrevAcceptWindow, info.Params.ReadDelay)
	}
}
