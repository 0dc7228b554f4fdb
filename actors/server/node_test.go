package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe/quorum"
)

// startMesh starts servers production nodes in process, s0..s<n-1>, each
// embedding a NATS server of one route mesh with clustered JetStream,
// together (the meta group needs a quorum), and stops them (last first)
// at the end of the test. extra supplies further options (Repair).
func startMesh(t *testing.T, log *slog.Logger, clusterName string, servers int, extra server.NodeOptions) []*server.Node {
	t.Helper()
	// The client ports are picked here too, not left to the kernel
	// (":-1"): a server's random client port can be a cluster port just
	// released by FreePorts, and the server that needs it then has no
	// route listener ("bind: address already in use") and no meta leader
	// for MetaTimeout. Picked together, the ports differ from each other.
	ports, err := cluster.FreePorts(2 * servers) // cluster ports, then client ports
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, p := range ports[:servers] {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	base := t.TempDir()
	nodes := make([]*server.Node, servers)
	errs := make([]error, servers)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := extra
			o.ID, o.DataDir, o.Cluster = fmt.Sprintf("s%d", i), filepath.Join(base, fmt.Sprint(i)), clusterName
			o.Listen, o.ClusterListen, o.Routes = fmt.Sprintf("127.0.0.1:%d", ports[servers+i]), fmt.Sprintf("127.0.0.1:%d", ports[i]), routes
			o.Insecure, o.NoSync, o.MetaTimeout, o.Logger = true, true, 45*time.Second, log
			nodes[i], errs[i] = server.StartNode(o)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range slices.Backward(nodes) {
			if n != nil {
				_ = n.Stop(context.Background())
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node s%d: %v", i, err)
		}
	}
	return nodes
}

// waitMembers waits until the metadata, read through each of nodes (nil
// ones skipped), lists exactly the member records of ids, and returns them
// as the first node read them. Call it before creating a topic: CreateTopic
// draws the ensembles from the member records it reads, and a read may be
// served by any replica of the metadata bucket (direct gets; the key
// listing's consumer lands on any peer), one that may be a moment behind
// the one that answered the last read. Waiting until one node lists every
// record is not enough: it returns at the very moment the last record is
// on one replica, and the topic created next can read another that still
// misses it ("needs 3 nodes per ensemble, only 2 members"). A node's
// gets are answered by its own server's replica (NATS prefers a local
// queue subscriber), so asking every node waits until every replica has
// the records.
func waitMembers(ctx context.Context, t *testing.T, nodes []*server.Node, ids ...string) []meta.Member {
	t.Helper()
	want := slices.Sorted(slices.Values(ids))
	var first []meta.Member
	testkit.WaitFor(t, "every node to read the member records of "+strings.Join(want, " "), func() bool {
		first = nil
		for _, n := range nodes {
			if n == nil {
				continue
			}
			ms, err := n.Meta().Members(ctx)
			if err != nil {
				return false
			}
			var got []string
			for _, m := range ms {
				got = append(got, m.ID)
			}
			if !slices.Equal(got, want) { // Members sorts by id
				return false
			}
			if first == nil {
				first = ms
			}
		}
		return true
	})
	return first
}

// sendNumbered sends m-0 .. m-<total-1> to topic, one at a time.
func sendNumbered(ctx context.Context, t *testing.T, c *raidq.Client, topic string, total int) {
	t.Helper()
	prod, err := c.Producer(topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := range total {
		if _, err := prod.Send(ctx, raidq.Message{Value: fmt.Appendf(nil, "m-%d", i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// consumeNumbered reads topic from from until it has every one of m-0 ..
// m-<total-1>, or ctx ends.
func consumeNumbered(ctx context.Context, t *testing.T, c *raidq.Client, topic string, from time.Time, total int) {
	t.Helper()
	cons, err := c.Consumer(topic, raidq.WithStart(from))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	want := make(map[string]bool, total)
	for i := range total {
		want[fmt.Sprintf("m-%d", i)] = true
	}
	for len(want) > 0 {
		select {
		case m := <-cons.Messages():
			delete(want, string(m.Value))
		case <-ctx.Done():
			t.Fatalf("consumed %d of %d", total-len(want), total)
		}
	}
}

// TestStartNodeThreeServerMesh starts three production nodes in process,
// each embedding a NATS server of one route mesh with clustered JetStream,
// creates an n=3 k=2 W=2 topic through the replicated metadata, and sends
// and consumes messages through clients whose catalog is the KV watch.
func TestStartNodeThreeServerMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("clustered JetStream takes a few seconds to elect")
	}
	log := testkit.Logger(t, slog.LevelWarn)
	const servers = 3
	start := time.Now()
	nodes := startMesh(t, log, "mesh", servers, server.NodeOptions{})
	t.Logf("three clustered nodes ready in %s", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	members := waitMembers(ctx, t, nodes, "s0", "s1", "s2")
	for _, m := range members {
		if m.ClientURL == "" || m.Incarnation == "" || m.Started == 0 || m.Heartbeat < m.Started {
			t.Errorf("incomplete member record %+v", m)
		}
	}
	p := quorum.Default()
	p.N, p.K, p.W = 3, 2, 2
	if _, err := nodes[1].Meta().CreateTopic(ctx, meta.TopicSpec{Name: "orders", Partitions: 2, Params: p}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		testkit.WaitFor(t, "node "+n.ID()+" to learn the topic", func() bool {
			_, err := n.Catalog().Topic("orders")
			return err == nil
		})
	}

	// A client on another server of the mesh (it watches the KV catalog).
	nc, err := nats.Connect(nodes[2].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := raidq.ConnectConn(nc, raidq.WithCluster("mesh"), raidq.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A plain NATS subscriber on this server: the fan-out holders run on
	// any of the three servers and must see its interest through routes
	// (they idle while no one subscribes).
	var fanned atomic.Int64
	fsub, err := nc.Subscribe("raidq.mesh.deliver.orders.>", func(*nats.Msg) { fanned.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer fsub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	const total = 200
	sendNumbered(ctx, t, c, "orders", total)
	consumeNumbered(ctx, t, c, "orders", from, total)
	testkit.WaitFor(t, "the fan-out to deliver every record to a subscriber on another server", func() bool {
		return fanned.Load() >= total
	})

	// Stop is graceful and idempotent.
	stopStart := time.Now()
	if err := nodes[2].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("graceful stop took %s", time.Since(stopStart).Round(time.Millisecond))
	if err := nodes[2].Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStartNodeRefuses(t *testing.T) {
	log := testkit.Logger(t, slog.LevelWarn)
	dir := t.TempDir()
	ok := server.NodeOptions{ID: "n1", DataDir: dir, Listen: "127.0.0.1:-1", Insecure: true, Logger: log}
	cases := []struct {
		name string
		edit func(*server.NodeOptions)
		want string
	}{
		{"no auth", func(o *server.NodeOptions) { o.Insecure = false }, "--insecure"},
		{"no id", func(o *server.NodeOptions) { o.ID = "" }, "--id"},
		{"bad id", func(o *server.NodeOptions) { o.ID = "a.b" }, "node id"},
		{"no data", func(o *server.NodeOptions) { o.DataDir = "" }, "--data"},
		{"bad listen", func(o *server.NodeOptions) { o.Listen = "nohost" }, "--listen"},
		{"routes without cluster-listen", func(o *server.NodeOptions) { o.Routes = []string{"nats-route://127.0.0.1:1"} }, "--cluster-listen"},
		{"bad route", func(o *server.NodeOptions) { o.ClusterListen, o.Routes = "127.0.0.1:-1", []string{"::"} }, "nats-route://"},
		{"nats and listen", func(o *server.NodeOptions) { o.NATSURL = "nats://127.0.0.1:1" }, "--nats"},
	}
	for _, tc := range cases {
		o := ok
		tc.edit(&o)
		_, err := server.StartNode(o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
	if _, err := server.StartNode(server.NodeOptions{ID: "n1", DataDir: dir, Logger: log}); !errors.Is(err, server.ErrAuthNotImplemented) {
		t.Errorf("without Insecure: %v", err)
	}

	// A damaged data directory: a clear error wrapping ErrCorrupt, nothing left running.
	slots := filepath.Join(dir, "slots")
	if err := os.MkdirAll(slots, 0o750); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"CURRENT": "MANIFEST-000001\n", "MANIFEST-000001": strings.Repeat("\xde\xad", 200)} {
		if err := os.WriteFile(filepath.Join(slots, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := server.StartNode(ok)
	if !errors.Is(err, slotstore.ErrCorrupt) || !strings.Contains(err.Error(), slots) {
		t.Fatalf("corrupt data dir: %v", err)
	}
}

// TestLocalClusterMetadata is `raidq dev`'s cluster: topics created through
// the KV metadata, visible to a client of another connection.
func TestLocalClusterMetadata(t *testing.T) {
	log := testkit.Logger(t, slog.LevelWarn)
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1",
		Cluster: "dev", NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms, err := lc.Meta().Members(ctx)
	if err != nil || len(ms) != 6 {
		t.Fatalf("members %v, %v", ms, err)
	}
	if err := lc.CreateTopic("orders", 2, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	if err := lc.CreateTopic("orders", 2, quorum.Default()); !errors.Is(err, meta.ErrTopicExists) {
		t.Fatalf("second create: %v", err)
	}
	// Another process's view: a client over a plain NATS connection.
	nc, err := nats.Connect(lc.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := raidq.ConnectConn(nc, raidq.WithCluster("dev"), raidq.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	from := time.Now()
	prod, err := c.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prod.Send(ctx, raidq.Message{Value: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Consumer("orders", raidq.WithStart(from))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	select {
	case m := <-cons.Messages():
		if string(m.Value) != "hello" {
			t.Fatalf("got %q", m.Value)
		}
	case <-ctx.Done():
		t.Fatal("nothing consumed")
	}
}
