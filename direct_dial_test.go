package raidq

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
)

// dialRig is a client's main server (its responder answers "who" with
// "main"), a node dialer over it whose member records and dials the test
// sets, and an actors client reaching nodes through the dialer.
type dialRig struct {
	t      *testing.T
	main   *nats.Conn
	d      *nodeDialer
	client *actors.Client
	log    *logRecorder
}

func newDialRig(t *testing.T) *dialRig {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) }) // last: after every close below
	srv := startResponder(t, natsserver.ServerOptions{InProcessOnly: true}, "main")
	main, err := srv.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(main.Close)
	r := &dialRig{t: t, main: main, log: &logRecorder{}}
	hub := newRefusalHub("tc", nil)
	t.Cleanup(hub.close)
	r.d = newNodeDialer(nil, main, nil, slog.New(r.log), hub)
	r.d.retryMin, r.d.retryMax = 20*time.Millisecond, 80*time.Millisecond
	t.Cleanup(r.d.close) // after the client's Close, as Client.Close does
	r.client, err = actors.NewClient(actors.ClientConfig{Cluster: "tc", Conn: main, Logger: testkit.Logger(t, slog.LevelWarn),
		NodeConn: r.d.conn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.client.Close)
	return r
}

// startResponder starts a NATS server whose responder answers "who" with name.
func startResponder(t *testing.T, o natsserver.ServerOptions, name string) *natsserver.Server {
	t.Helper()
	srv, err := natsserver.StartServer(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect("responder")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("who", func(m *nats.Msg) { _ = m.Respond([]byte(name)) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return srv
}

// who is the server answering a request to node: "main", or the name of
// the node's own server.
func (r *dialRig) who(node string) string {
	r.t.Helper()
	b, err := r.client.Request(context.Background(), node, "who", nil, 2*time.Second)
	if err != nil {
		r.t.Fatalf("request to %s: %v", node, err)
	}
	return string(b)
}

// gate blocks its callers until opened, telling entered about each.
type gate struct {
	entered chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 16), open: make(chan struct{})} }

// wait blocks until the gate opens (true) or ctx ends (false).
func (g *gate) wait(ctx context.Context) bool {
	g.entered <- struct{}{}
	select {
	case <-g.open:
		return true
	case <-ctx.Done():
		return false
	}
}

// TestDirectDialOffSenders: the first send to a node starts its dial and
// goes over the main connection; while the member records are being
// listed, and then while the node's server is being dialed, requests to
// that node and to another one are answered over the main connection.
// Once the dial is through, the node is reached over its own connection.
func TestDirectDialOffSenders(t *testing.T) {
	r := newDialRig(t)
	own := startResponder(t, natsserver.ServerOptions{InProcessOnly: true}, "own")
	listing, dialing := newGate(), newGate()
	r.d.members = func(ctx context.Context) ([]meta.Member, error) {
		if !listing.wait(ctx) {
			return nil, ctx.Err()
		}
		return []meta.Member{{ID: "n1", ClientURL: "nats://n1.invalid:4222"}, {ID: "n2"}}, nil
	}
	var dialed []*nats.Conn
	var mu sync.Mutex
	r.d.dial = func(url string, _ ...nats.Option) (*nats.Conn, error) {
		if url != "nats://n1.invalid:4222" {
			return nil, fmt.Errorf("dialed %s", url)
		}
		dialing.wait(context.Background())
		nc, err := own.Connect("direct")
		mu.Lock()
		dialed = append(dialed, nc)
		mu.Unlock()
		return nc, err
	}

	if got := r.who("n1"); got != "main" {
		t.Fatalf("first request to n1 answered by %q, want main", got)
	}
	<-listing.entered // the listing is held
	for _, node := range []string{"n2", "n1"} {
		if got := r.who(node); got != "main" {
			t.Fatalf("while listing: %s answered by %q, want main", node, got)
		}
	}
	close(listing.open)
	<-dialing.entered // n1's server is being dialed
	for _, node := range []string{"n2", "n1"} {
		if got := r.who(node); got != "main" {
			t.Fatalf("while dialing: %s answered by %q, want main", node, got)
		}
	}
	close(dialing.open)
	testkit.WaitFor(t, "n1 reached over its own connection", func() bool { return r.who("n1") == "own" })
	if nc := r.d.conn("n2"); nc != nil {
		t.Fatalf("n2 (no client URL): %v, want nil (the main connection for good)", nc)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 1 {
		t.Fatalf("dialed n1 %d times, want once", len(dialed))
	}
}

// TestDirectDialRetry: a node whose server is down at the first send is
// reached over the main connection (a Warn names the node and the error),
// and over its own connection once its server is up: a later send after
// the backoff dials again (an Info says so).
func TestDirectDialRetry(t *testing.T) {
	r := newDialRig(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close() // down: nothing listens there
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	r.d.members = func(context.Context) ([]meta.Member, error) {
		return []meta.Member{{ID: "n1", ClientURL: url}}, nil
	}

	if got := r.who("n1"); got != "main" {
		t.Fatalf("n1 (down) answered by %q, want main", got)
	}
	testkit.WaitFor(t, "a Warn for the failed dial", func() bool {
		return r.log.count(slog.LevelWarn, "direct node connection failed") > 0
	})
	if rec := r.log.first(slog.LevelWarn); rec["node"] != "n1" || rec["err"] == "" || rec["url"] != url {
		t.Fatalf("Warn attributes %v, want node n1, the url and the error", rec)
	}
	if got := r.who("n1"); got != "main" {
		t.Fatalf("n1 (down) answered by %q, want main", got)
	}

	startResponder(t, natsserver.ServerOptions{Host: "127.0.0.1", Port: port}, "own")
	testkit.WaitFor(t, "n1 reached over its own connection", func() bool { return r.who("n1") == "own" })
	if r.log.count(slog.LevelInfo, "direct node connection up") != 1 {
		t.Fatalf("want one Info for the recovered dial; log: %v", r.log.all())
	}
}

// TestDirectDialCloseRace (run with -race): closing the dialer while a
// dial is under way waits for it and closes the connection it brings;
// a listing under way stops at close. Senders keep asking meanwhile.
func TestDirectDialCloseRace(t *testing.T) {
	t.Run("dial", func(t *testing.T) {
		r := newDialRig(t)
		own := startResponder(t, natsserver.ServerOptions{InProcessOnly: true}, "own")
		r.d.members = func(context.Context) ([]meta.Member, error) {
			return []meta.Member{{ID: "n1", ClientURL: "nats://n1.invalid:4222"}, {ID: "n2", ClientURL: "nats://n2.invalid:4222"}}, nil
		}
		dialing := newGate()
		got := make(chan *nats.Conn, 2)
		r.d.dial = func(string, ...nats.Option) (*nats.Conn, error) {
			dialing.wait(context.Background())
			nc, err := own.Connect("direct")
			got <- nc
			return nc, err
		}
		stop := make(chan struct{})
		var senders sync.WaitGroup
		for _, node := range []string{"n1", "n2"} {
			senders.Add(1)
			go func() {
				defer senders.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					r.d.conn(node)
				}
			}()
		}
		<-dialing.entered
		<-dialing.entered
		closed := make(chan struct{})
		go func() { r.d.close(); close(closed) }()
		close(dialing.open)
		<-closed
		close(stop)
		senders.Wait()
		for range 2 {
			if nc := <-got; !nc.IsClosed() {
				t.Fatal("a connection dialed across close is still open")
			}
		}
		if nc := r.d.conn("n1"); nc != nil {
			t.Fatalf("closed dialer gave %v, want nil", nc)
		}
	})
	t.Run("listing", func(t *testing.T) {
		r := newDialRig(t)
		listing := newGate()
		r.d.members = func(ctx context.Context) ([]meta.Member, error) {
			listing.wait(ctx) // never opened: close ends it
			return nil, ctx.Err()
		}
		r.d.dial = func(url string, _ ...nats.Option) (*nats.Conn, error) {
			return nil, fmt.Errorf("dialed %s", url)
		}
		if got := r.who("n1"); got != "main" {
			t.Fatalf("n1 answered by %q, want main", got)
		}
		<-listing.entered
		r.client.Close()
		r.d.close() // returns: the listing stops
	})
}

// logRecorder is a slog.Handler keeping each record's level, message and
// attributes.
type logRecorder struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"level": r.Level.String(), "msg": r.Message}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, m)
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) count(level slog.Level, msgPrefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.recs {
		if m["level"] == level.String() && len(m["msg"]) >= len(msgPrefix) && m["msg"][:len(msgPrefix)] == msgPrefix {
			n++
		}
	}
	return n
}

func (h *logRecorder) first(level slog.Level) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.recs {
		if m["level"] == level.String() {
			return m
		}
	}
	return nil
}

func (h *logRecorder) all() []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]map[string]string(nil), h.recs...)
}
