package actors

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
)

// nodeConnEnv is two NATS servers, main (the client's) and own (a node's
// own), each with a responder on "who" that answers with its server's
// name, and a client over main whose NodeConn is nodeConn (given the
// client's connections to main and own).
func nodeConnEnv(t *testing.T, nodeConn func(main, own *nats.Conn) func(string) *nats.Conn) (*Client, *nats.Conn, *nats.Conn) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) }) // runs last: after every close below
	conns := map[string]*nats.Conn{}
	for _, name := range []string{"main", "own"} {
		srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		node, err := srv.Connect("node-" + name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		if _, err := node.Subscribe("who", func(m *nats.Msg) { _ = m.Respond([]byte(name)) }); err != nil {
			t.Fatal(err)
		}
		if err := node.Flush(); err != nil {
			t.Fatal(err)
		}
		cnc, err := srv.Connect("client-" + name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cnc.Close)
		conns[name] = cnc
	}
	c, err := NewClient(ClientConfig{Cluster: "tc", Conn: conns["main"], Logger: testkit.Logger(t, slog.LevelWarn),
		Link: LinkConfig{Timeout: 2 * time.Second}, NodeConn: nodeConn(conns["main"], conns["own"])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, conns["main"], conns["own"]
}

// who asks node's link which server answers "who".
func who(t *testing.T, c *Client, node string) string {
	t.Helper()
	b, err := c.Request(context.Background(), node, "who", nil, time.Second)
	if err != nil {
		t.Fatalf("who via %s: %v", node, err)
	}
	return string(b)
}

// TestLinkNodeConnOffLock: NodeConn is asked outside the client's lock,
// so one that takes its time (a dial, a metadata listing) stalls no other
// sender: while it is held for node n1, a request to n2 and one to n1
// itself (over the client's connection, its link being up) are answered.
func TestLinkNodeConnOffLock(t *testing.T) {
	asked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c, main, _ := nodeConnEnv(t, func(_, _ *nats.Conn) func(string) *nats.Conn {
		return func(node string) *nats.Conn {
			if node == "n1" {
				once.Do(func() { close(asked) })
				<-release
			}
			return nil
		}
	})
	creator := make(chan string, 1)
	go func() {
		b, err := c.Request(context.Background(), "n1", "who", nil, time.Second)
		if err != nil {
			b = []byte(err.Error())
		}
		creator <- string(b)
	}()
	<-asked // n1's link is up, its NodeConn held
	if got := who(t, c, "n2"); got != "main" {
		t.Fatalf("n2 answered by %q, want main", got)
	}
	if got := who(t, c, "n1"); got != "main" {
		t.Fatalf("n1 (meanwhile) answered by %q, want main", got)
	}
	close(release)
	if got := <-creator; got != "main" {
		t.Fatalf("n1's first request: %q, want main", got)
	}
	if l, _ := c.link("n1"); l.conn() != main {
		t.Fatal("n1's link left the client's connection after a nil NodeConn")
	}
}

// TestLinkMovesToNodeConn: a link starts on the client's connection while
// NodeConn answers it ("not yet"), asks again on later sends, and moves
// to the node's own connection once NodeConn gives it; a request sent
// over the old connection before the move still gets its reply.
func TestLinkMovesToNodeConn(t *testing.T) {
	var ready atomic.Bool
	var asks atomic.Int32
	c, main, own := nodeConnEnv(t, func(main, own *nats.Conn) func(string) *nats.Conn {
		return func(string) *nats.Conn {
			asks.Add(1)
			if ready.Load() {
				return own
			}
			return main // not yet
		}
	})
	// A request held by main's side, answered only after the move.
	held := make(chan *nats.Msg, 1)
	sub, err := main.Subscribe("held", func(m *nats.Msg) { held <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	heldDone := make(chan error, 1)
	go func() {
		b, err := c.Request(context.Background(), "n1", "held", nil, 2*time.Second)
		if err == nil && string(b) != "late" {
			err = fmt.Errorf("answered %q", b)
		}
		heldDone <- err
	}()
	m := <-held
	if got := who(t, c, "n1"); got != "main" {
		t.Fatalf("before NodeConn gave a connection: answered by %q, want main", got)
	}
	testkit.WaitFor(t, "NodeConn asked again on a later send", func() bool {
		before := asks.Load()
		who(t, c, "n1")
		return asks.Load() > before
	})
	ready.Store(true)
	testkit.WaitFor(t, "n1's link on its own connection", func() bool { return who(t, c, "n1") == "own" })
	if l, _ := c.link("n1"); l.conn() != own {
		t.Fatal("n1's link is not on the node's connection")
	}
	if err := m.Respond([]byte("late")); err != nil {
		t.Fatal(err)
	}
	if err := <-heldDone; err != nil {
		t.Fatalf("request sent before the move: %v", err)
	}
	n := asks.Load()
	for range 3 {
		who(t, c, "n1")
	}
	if asks.Load() != n {
		t.Fatal("NodeConn asked again after the link moved")
	}
}

// TestLinkNodeConnNilAskedOnce: a nil answer settles the link on the
// client's connection; NodeConn is not asked again however many sends
// follow (the node's tests count one ask per peer).
func TestLinkNodeConnNilAskedOnce(t *testing.T) {
	var asks atomic.Int32
	c, _, _ := nodeConnEnv(t, func(_, _ *nats.Conn) func(string) *nats.Conn {
		return func(string) *nats.Conn { asks.Add(1); return nil }
	})
	start := time.Now()
	for time.Since(start) < 3*nodeConnRecheck {
		who(t, c, "n1")
	}
	if n := asks.Load(); n != 1 {
		t.Fatalf("NodeConn asked %d times, want once", n)
	}
}
