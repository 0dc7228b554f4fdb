package server

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/scenarios/testkit"
)

// syncBuffer is a bytes.Buffer safe for the node's goroutines to log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startHealthNode starts a single-server node (no routes) in a temporary
// directory, logging into buf, with the health watch every 50ms.
func startHealthNode(t *testing.T, buf *syncBuffer, watermark float64) *Node {
	t.Helper()
	old := healthEvery
	healthEvery = 50 * time.Millisecond
	t.Cleanup(func() { healthEvery = old })
	n, err := StartNode(NodeOptions{ID: "h1", DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Insecure: true, NoSync: true,
		DiskWatermark: watermark, Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// TestNodeDiskPressure: past the watermark the node says so in its status
// (and its health becomes degraded at the asking side) and in its log; a
// JetStream turned off while the disk is still full does not stop it.
func TestNodeDiskPressure(t *testing.T) {
	var buf syncBuffer
	n := startHealthNode(t, &buf, 0.0001) // any real disk is past 0.01%
	st := n.node.Status()
	if st.DiskTotal == 0 || st.DiskFree == 0 || !strings.Contains(st.DiskFull, "past the 0% watermark") {
		t.Fatalf("status: total %d free %d, disk_full %q", st.DiskTotal, st.DiskFree, st.DiskFull)
	}
	if err := n.server.NATS().DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the node to log that JetStream is off", func() bool {
		return strings.Contains(buf.String(), "embedded JetStream is off")
	})
	log := buf.String()
	if !strings.Contains(log, "disk past the watermark") || !strings.Contains(log, "embedded JetStream is off") {
		t.Fatalf("log says neither the disk nor JetStream:\n%s", log)
	}
	if st := n.node.Status(); st.JetStream == "" {
		t.Errorf("status does not say JetStream is off")
	}
	select {
	case err := <-n.Fatal():
		t.Fatalf("stopped while the disk is still full: %v", err)
	default:
	}
}

// TestNodeJetStreamOffStops: with JetStream turned off and the disk below
// the watermark, the node stops through Fatal (its supervisor restarts
// it, and the restarted server runs JetStream again).
func TestNodeJetStreamOffStops(t *testing.T) {
	var buf syncBuffer
	n := startHealthNode(t, &buf, bus.DefaultDiskWatermark)
	if st := n.node.Status(); st.DiskFull != "" || st.JetStream != "" {
		t.Skipf("this machine's disk is past the 90%% watermark (%s): cannot check the restart", st.DiskFull)
	}
	if err := n.server.NATS().DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.Fatal():
		if !errors.Is(err, ErrJetStreamOff) {
			t.Fatalf("fatal %v, want ErrJetStreamOff", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no Fatal 30s after JetStream was turned off; log:\n%s", buf.String())
	}
}

// TestHealthChanged: which changes are logged and which stop the node.
func TestHealthChanged(t *testing.T) {
	var buf syncBuffer
	n := &Node{opts: NodeOptions{ID: "x", DataDir: "/d"}, log: slog.New(slog.NewTextHandler(&buf, nil))}
	full, off := healthState{disk: "disk 95% full"}, healthState{jetStream: "off"}
	if err := n.healthChanged(healthState{}, full); err != nil || !strings.Contains(buf.String(), "disk past the watermark") {
		t.Errorf("disk filling: %v\n%s", err, buf.String())
	}
	if err := n.healthChanged(full, healthState{disk: "disk 95% full", jetStream: "off"}); err != nil {
		t.Errorf("JetStream off on a full disk: %v, want no stop yet", err)
	}
	if err := n.healthChanged(healthState{disk: "disk 95% full", jetStream: "off"}, off); !errors.Is(err, ErrJetStreamOff) {
		t.Errorf("disk back, JetStream off: %v, want ErrJetStreamOff", err)
	}
	if !strings.Contains(buf.String(), "below the watermark again") {
		t.Errorf("log:\n%s", buf.String())
	}
}
