package natsserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/scenarios/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func startServer(t *testing.T, o ServerOptions) *Server {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testkit.Logger(t, slog.LevelWarn)
	}
	s, err := StartServer(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, s *Server, name string) *nats.Conn {
	t.Helper()
	nc, err := s.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// serveSlots answers write requests on node's slot subjects like a toy
// node: OK for a valid request whose topic matches the subject.
func serveSlots(t *testing.T, nc *nats.Conn, subj bus.Subjects, node string) {
	t.Helper()
	sub, err := nc.Subscribe(subj.SlotAll(node), func(msg *nats.Msg) {
		reply := bus.WriteReply{Status: bus.StatusOK, NodeClock: time.Now().UnixNano()}
		_, topic, part, err := subj.ParseSlot(msg.Subject)
		req, derr := bus.DecodeRequest(msg.Data)
		switch w, ok := req.(bus.WriteReq); {
		case err != nil || derr != nil:
			reply = bus.WriteReply{Status: bus.StatusBadRequest, Detail: bus.TruncDetail(fmt.Sprint(err, derr))}
		case !ok || w.Topic != topic || w.Partition != part:
			reply = bus.WriteReply{Status: bus.StatusBadRequest, Detail: "subject does not match payload"}
		}
		_ = msg.Respond(reply.Marshal())
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

func writeOnce(nc *nats.Conn, subj bus.Subjects, node string, w bus.WriteReq) (bus.WriteReply, error) {
	msg, err := nc.Request(subj.Slot(node, w.Topic, w.Partition), w.Marshal(), 2*time.Second)
	if err != nil {
		return bus.WriteReply{}, err
	}
	return bus.DecodeWriteReply(msg.Data)
}

func TestInProcessServerJetStream(t *testing.T) {
	s := startServer(t, ServerOptions{Name: "n1", InProcessOnly: true, JetStream: true, StoreDir: t.TempDir()})
	if s.ClientURL() != "" {
		t.Errorf("in-process server has client URL %q", s.ClientURL())
	}
	if !s.NATS().JetStreamEnabled() {
		t.Fatal("JetStream not enabled")
	}
	subj, _ := bus.NewSubjects("test")
	serveSlots(t, connect(t, s, "node"), subj, "n1")
	nc := connect(t, s, "producer")

	rep, err := writeOnce(nc, subj, "n1", bus.WriteReq{Topic: "orders", Partition: 2, Offset: 99, Shard: []byte("shard")})
	if err != nil || rep.Status != bus.StatusOK || rep.NodeClock == 0 {
		t.Fatalf("write: %+v, %v", rep, err)
	}
	// A payload whose topic disagrees with the subject is refused.
	msg, err := nc.Request(subj.Slot("n1", "other", 2), bus.WriteReq{Topic: "orders", Partition: 2, Shard: []byte("s")}.Marshal(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := bus.DecodeWriteReply(msg.Data); err != nil || rep.Status != bus.StatusBadRequest {
		t.Fatalf("mismatched topic: %+v, %v", rep, err)
	}

	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "meta"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put("topic.orders", []byte("n=6")); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.Shutdown() // idempotent
}

func TestListeningServer(t *testing.T) {
	s := startServer(t, ServerOptions{Name: "l1", Port: -1, MaxPayload: 2 << 20})
	url := s.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":-1") || strings.HasSuffix(url, ":0") {
		t.Fatalf("ClientURL = %q", url)
	}
	if s.MaxPayload() != 2<<20 {
		t.Fatalf("MaxPayload = %d", s.MaxPayload())
	}
	nc, err := nats.Connect(url, nats.Name("plain client"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.MaxPayload() != 2<<20 {
		t.Fatalf("client sees max payload %d", nc.MaxPayload())
	}
	subj, _ := bus.NewSubjects("test")
	serveSlots(t, connect(t, s, "node"), subj, "l1")
	if rep, err := writeOnce(nc, subj, "l1", bus.WriteReq{Topic: "t", Shard: []byte{1}}); err != nil || rep.Status != bus.StatusOK {
		t.Fatalf("write: %+v, %v", rep, err)
	}
}

func TestStartServerErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		o    ServerOptions
		want string
	}{
		{ServerOptions{Name: "x", InProcessOnly: true, ClusterName: "c", ClusterPort: -1}, "InProcessOnly"},
		{ServerOptions{Name: "x", ClusterPort: -1}, "without ClusterName"},
		{ServerOptions{Name: "x", ClusterName: "c"}, "needs a ClusterPort"},
		{ServerOptions{ClusterName: "c", ClusterPort: -1, JetStream: true, StoreDir: dir}, "unique server Name"},
		{ServerOptions{Name: "x", JetStream: true}, "StoreDir"},
		{ServerOptions{Name: "x", Port: 70000}, "out of range"},
		{ServerOptions{Name: "x", ClusterName: "c", ClusterPort: -1, Routes: []string{"::bad"}}, "not a URL"},
	} {
		s, err := StartServer(c.o)
		if err == nil {
			s.Shutdown()
			t.Errorf("%+v: started", c.o)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %q, want it to mention %q", c.o, err, c.want)
		}
	}

	// A port in use: the error carries the server's own reason.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s, err := StartServer(ServerOptions{Name: "busy", Host: "127.0.0.1", Port: port, ReadyTimeout: 2 * time.Second})
	if err == nil {
		s.Shutdown()
		t.Fatal("started on a busy port")
	}
	if !strings.Contains(err.Error(), "failed to start") || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("busy port error: %v", err)
	}
	t.Log(err)
}

// freePorts reserves n distinct free TCP ports on the loopback interface.
// (Another process could take one before the server binds it; tests accept
// that small race to give every server the full route list up front.)
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func TestCluster(t *testing.T) {
	const size = 3
	ports := freePorts(t, size)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	servers := make([]*Server, size)
	for i := range size {
		servers[i] = startServer(t, ServerOptions{
			Name: fmt.Sprintf("s%d", i), Host: "127.0.0.1", Port: -1,
			ClusterName: "raidq-test", ClusterHost: "127.0.0.1", ClusterPort: ports[i], Routes: routes,
			JetStream: true, StoreDir: t.TempDir(),
		})
		if got, want := servers[i].ClusterURL(), routes[i]; got != want {
			t.Fatalf("ClusterURL = %q, want %q", got, want)
		}
	}

	testkit.WaitFor(t, "the JetStream meta group to elect a leader", func() bool { return hasMetaLeader(servers) })

	// A replicated KV bucket (the metadata store of docs/design.md#metadata-in-jetstream-kv) works.
	nc := connect(t, servers[2], "admin")
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	var kv nats.KeyValue
	// Meta leader known, peers maybe still catching up: the first
	// requests can fail.
	testkit.WaitFor(t, fmt.Sprintf("an R%d bucket to be created", size), func() bool {
		kv, err = js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "meta", Replicas: size})
		if err != nil {
			t.Logf("create R%d bucket: %v", size, err)
		}
		return err == nil
	})
	if _, err := kv.Put("members", []byte("s0,s1,s2")); err != nil {
		t.Fatal(err)
	}

	// A slot request crosses the routes: node on s0, producer on s2.
	subj, _ := bus.NewSubjects("raidq-test")
	serveSlots(t, connect(t, servers[0], "node"), subj, "s0")
	testkit.WaitFor(t, "the node's interest to propagate over the routes", func() bool {
		rep, err := writeOnce(nc, subj, "s0", bus.WriteReq{Topic: "t", Partition: 1, Shard: []byte{1}})
		if err == nil && rep.Status == bus.StatusOK {
			return true
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("write across routes: %+v, %v", rep, err)
		}
		return false // interest not yet propagated over the routes
	})
}

func hasMetaLeader(servers []*Server) bool {
	for _, s := range servers {
		if s.NATS().JetStreamIsLeader() {
			return true
		}
	}
	return false
}
