package actors

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
)

// requestEnv is a NATS server, a responder connection and a client whose
// links use cfg.
func requestEnv(t *testing.T, cfg LinkConfig) (*Client, *nats.Conn) {
	t.Helper()
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	node, err := srv.Connect("node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	cnc, err := srv.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	c, err := NewClient(ClientConfig{Cluster: "tc", Conn: cnc, Logger: testkit.Logger(t, slog.LevelWarn), Link: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, node
}

func outstanding(t *testing.T, c *Client, node string) int {
	t.Helper()
	l, err := c.link(node)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

// TestClientRequest: Request goes through the node's link: replies come
// back, a node nothing answers for is ErrNoResponders, a silent one
// ErrLinkTimeout after the caller's timeout (or the link's, if shorter),
// and none of them stays outstanding.
func TestClientRequest(t *testing.T) {
	c, node := requestEnv(t, LinkConfig{Timeout: 400 * time.Millisecond})
	if _, err := node.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(append([]byte("re:"), m.Data...)) }); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Subscribe("silent", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	got, err := c.Request(ctx, "n1", "echo", []byte("x"), time.Second)
	if err != nil || string(got) != "re:x" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	if _, err := c.Request(ctx, "n1", "nobody", nil, time.Second); !errors.Is(err, ErrNoResponders) {
		t.Fatalf("no subscriber: %v, want %v", err, ErrNoResponders)
	}

	start := time.Now()
	if _, err := c.Request(ctx, "n1", "silent", nil, 50*time.Millisecond); !errors.Is(err, ErrLinkTimeout) {
		t.Fatalf("silent node: %v, want %v", err, ErrLinkTimeout)
	}
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Fatalf("the caller's 50ms timeout took %v", d)
	}
	start = time.Now()
	if _, err := c.Request(ctx, "n1", "silent", nil, 10*time.Second); !errors.Is(err, ErrLinkTimeout) {
		t.Fatalf("silent node, long caller timeout: %v, want %v", err, ErrLinkTimeout)
	}
	if d := time.Since(start); d < 350*time.Millisecond || d > 2*time.Second {
		t.Fatalf("the link's 400ms timeout took %v", d)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := c.Request(cctx, "n1", "silent", nil, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want %v", err, context.Canceled)
	}
	if n := outstanding(t, c, "n1"); n != 0 {
		t.Fatalf("%d requests still outstanding", n)
	}
}

// TestClientRequestSaturated: a link at MaxInflight refuses a request at
// once, whether its outstanding requests are a producer's or Request's.
func TestClientRequestSaturated(t *testing.T) {
	c, node := requestEnv(t, LinkConfig{MaxInflight: 2, Timeout: 2 * time.Second})
	hold := make(chan struct{})
	if _, err := node.Subscribe("hold", func(m *nats.Msg) {
		go func() { <-hold; _ = m.Respond([]byte("late")) }()
	}); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Request(ctx, "n1", "hold", nil, 0)
			done <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for outstanding(t, c, "n1") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two held requests never became outstanding")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if _, err := c.Request(ctx, "n1", "hold", nil, time.Second); !errors.Is(err, ErrLinkSaturated) {
		t.Fatalf("third request: %v, want %v", err, ErrLinkSaturated)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("the refusal took %v", d)
	}
	close(hold)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("held request: %v", err)
		}
	}
	if _, err := c.Request(ctx, "n1", "hold", nil, time.Second); err != nil {
		t.Fatalf("after the replies: %v", err)
	}
}

// TestClientRequestClosed: a closed client's requests fail at once.
func TestClientRequestClosed(t *testing.T) {
	c, _ := requestEnv(t, LinkConfig{})
	if _, err := c.link("n1"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Request(context.Background(), "n1", "x", nil, time.Second); !errors.Is(err, ErrLinkClosed) {
		t.Fatalf("closed link: %v, want %v", err, ErrLinkClosed)
	}
	if _, err := c.Request(context.Background(), "n2", "x", nil, time.Second); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("closed client: %v, want %v", err, core.ErrClosed)
	}
}
