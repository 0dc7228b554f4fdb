package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/scenarios/localtest"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// metricSum is metrics.Sum that fails the test on a gather error.
func metricSum(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	v, found, err := metrics.Sum(g, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v, found
}

// produceN sends n messages to topic and waits for every outcome.
func produceN(t *testing.T, c *raidq.Client, topic string, n int) {
	t.Helper()
	p, err := c.Producer(topic)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		wg.Add(1)
		p.Produce(context.Background(), raidq.Message{Value: []byte(fmt.Sprintf("m-%d", i))}, func(_ raidq.Message, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		t.Fatalf("send: %v", first)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// TestClusterMetrics: node and client metrics of an in-process cluster
// land in one registry (nodes told apart by their node label) and move
// with writes and reads; a killed node's metrics leave the registry and
// come back when it restarts.
func TestClusterMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	lc, c := localtest.Start(t, server.LocalClusterConfig{Logger: testkit.Logger(t, slog.LevelWarn), Metrics: reg}, 2)
	start := time.Now()
	const total = 300
	produceN(t, c, "orders", total)

	orders := map[string]string{"topic": "orders"}
	if v, _ := metricSum(t, reg, "raidq_producer_records_total", map[string]string{"topic": "orders", "result": "acked"}); v != total {
		t.Errorf("producer acked records = %v, want %d", v, total)
	}
	if v, found := metricSum(t, reg, "raidq_producer_records_total", map[string]string{"topic": "orders", "result": "failed"}); !found || v != 0 {
		t.Errorf("producer failed records = %v (found %v), want 0", v, found)
	}
	stripes, _ := metricSum(t, reg, "raidq_producer_ack_duration_seconds", orders)
	attempts, _ := metricSum(t, reg, "raidq_producer_stripe_attempts_total", orders)
	if stripes < 1 || attempts < stripes {
		t.Errorf("%v stripes acked in %v attempts", stripes, attempts)
	}
	// Every acked stripe had at least 4 OK answers, counted before they were sent.
	okWrites, _ := metricSum(t, reg, "raidq_node_writes_total", map[string]string{"status": "ok"})
	if okWrites < 4*stripes {
		t.Errorf("nodes answered %v writes OK for %v acked stripes, want >= 4 per stripe", okWrites, stripes)
	}
	if v, _ := metricSum(t, reg, "raidq_node_write_duration_seconds", nil); v < okWrites {
		t.Errorf("write latency observations = %v, want >= %v", v, okWrites)
	}
	if v, _ := metricSum(t, reg, "raidq_node_store_commit_duration_seconds", nil); v < 4*stripes {
		t.Errorf("store commits = %v, want >= %v", v, 4*stripes)
	}
	busy := 0
	for _, id := range lc.NodeIDs() {
		node := map[string]string{"node": id}
		if _, found := metricSum(t, reg, "raidq_node_pending_requests", node); !found {
			t.Errorf("node %s: no pending gauge", id)
		}
		if v, _ := metricSum(t, reg, "raidq_node_disk_bytes", node); v <= 0 {
			t.Errorf("node %s: disk bytes %v", id, v)
		}
		if v, _ := metricSum(t, reg, "raidq_node_writes_total", map[string]string{"node": id, "status": "ok"}); v > 0 {
			busy++
		}
		// NodeStats and the metrics count the same accepted writes.
		st := lc.NodeStats(indexOf(lc.NodeIDs(), id))
		if v, _ := metricSum(t, reg, "raidq_node_writes_total", map[string]string{"node": id, "status": "ok"}); v > float64(st.Writes.Load()) {
			t.Errorf("node %s: %v OK writes in metrics, %d in NodeStats", id, v, st.Writes.Load())
		}
	}
	if busy < 4 {
		t.Errorf("only %d nodes counted OK writes", busy)
	}
	if v, _ := metricSum(t, reg, "raidq_node_owners", nil); v < 1 {
		t.Errorf("owners alive = %v right after writing, want >= 1", v)
	}

	// Read everything back: the reader counts deliveries, the nodes scans and seals.
	cons, err := c.Consumer("orders", raidq.WithStart(start))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	deadline := time.After(30 * time.Second)
	for got < total {
		select {
		case <-cons.Messages():
			got++
		case <-deadline:
			t.Fatalf("consumed %d of %d", got, total)
		}
	}
	cons.Close()
	if v, _ := metricSum(t, reg, "raidq_reader_deliveries_total", orders); v != total {
		t.Errorf("reader deliveries = %v, want %d", v, total)
	}
	if v, _ := metricSum(t, reg, "raidq_reader_in_doubt_total", orders); v != 0 {
		t.Errorf("reader in doubt = %v, want 0", v)
	}
	if v, _ := metricSum(t, reg, "raidq_node_scans_total", nil); v < 1 {
		t.Errorf("node scans = %v", v)
	}
	if v, _ := metricSum(t, reg, "raidq_node_clock_floor_persists_total", nil); v < 1 {
		t.Errorf("clock floor persists = %v", v)
	}

	// A killed node leaves the registry; restarted, it registers afresh.
	if err := lc.KillNode(5); err != nil {
		t.Fatal(err)
	}
	if _, found := metricSum(t, reg, "raidq_node_writes_total", map[string]string{"node": "n5"}); found {
		t.Error("killed node n5 still has metrics")
	}
	if err := lc.RestartNode(5); err != nil {
		t.Fatalf("restart with metrics: %v", err)
	}
	if v, found := metricSum(t, reg, "raidq_node_writes_total", map[string]string{"node": "n5", "status": "ok"}); !found || v != 0 {
		t.Errorf("restarted n5: ok writes %v (found %v), want a fresh 0", v, found)
	}
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// startListeningCluster starts six nodes behind a NATS port and connects to it.
func startListeningCluster(t *testing.T, cluster string) (*server.LocalCluster, *nats.Conn) {
	t.Helper()
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), Logger: testkit.Logger(t, slog.LevelWarn),
		Cluster: cluster, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	nc, err := nats.Connect(lc.ClientURL(), nats.Name("status-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	waitStatusEndpoints(t, nc, cluster, lc.NodeIDs())
	return lc, nc
}

// waitStatusEndpoints waits until every node of ids answers on its status
// endpoint. A node is started (node.Start returns) before the server has
// the subscriptions of its micro service: they are sent after the flush
// that covers the slot and scan subjects, so a status request or a PING
// right after the start can find no responder. The status endpoint is the
// last of the micro service's subscriptions, on the same connection as
// the rest, so once it answers the node also answers PING, INFO and STATS.
func waitStatusEndpoints(t *testing.T, nc *nats.Conn, cluster string, ids []string) {
	t.Helper()
	subj, err := bus.NewSubjects(cluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		testkit.WaitFor(t, "node "+id+"'s status endpoint to answer", func() bool {
			_, err := nc.Request(subj.Status(id), nil, 5*time.Second)
			return err == nil
		})
	}
}

// TestNodeMicroService: every node runs the raidq-node micro service:
// PING finds all six (with their node and cluster metadata), INFO lists
// the status endpoint on raidq.<cluster>.status.<node>, STATS carries the
// node counters, and the status endpoint answers the node's status.
func TestNodeMicroService(t *testing.T) {
	lc, nc := startListeningCluster(t, "svc")
	if err := lc.CreateTopic("orders", 1, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	c, err := lc.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	produceN(t, c, "orders", 50)

	// PING: gather replies until all six nodes have answered.
	replies := make(chan *nats.Msg, 64)
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.PING.raidq-node", inbox, nil); err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]string) // node -> micro instance id
	deadline := time.After(10 * time.Second)
	for len(ids) < 6 {
		select {
		case m := <-replies:
			var p micro.Ping
			if err := json.Unmarshal(m.Data, &p); err != nil {
				t.Fatal(err)
			}
			if p.Name != "raidq-node" || p.Metadata["cluster"] != "svc" || p.Version != bus.SemVer() {
				t.Fatalf("ping reply %+v", p)
			}
			ids[p.Metadata["node"]] = p.ID
		case <-deadline:
			t.Fatalf("PING: %d of 6 nodes answered: %v", len(ids), ids)
		}
	}
	wrote := 0
	for _, node := range lc.NodeIDs() {
		id, ok := ids[node]
		if !ok {
			t.Fatalf("node %s did not answer PING", node)
		}
		var info micro.Info
		request(t, nc, "$SRV.INFO.raidq-node."+id, &info)
		if len(info.Endpoints) != 1 || info.Endpoints[0].Name != "status" || info.Endpoints[0].Subject != "raidq.svc.status."+node {
			t.Errorf("node %s INFO endpoints: %+v", node, info.Endpoints)
		}
		var stats micro.Stats
		request(t, nc, "$SRV.STATS.raidq-node."+id, &stats)
		if len(stats.Endpoints) != 1 {
			t.Fatalf("node %s STATS endpoints: %+v", node, stats.Endpoints)
		}
		var data struct {
			Counters bus.NodeCounters `json:"counters"`
		}
		if err := json.Unmarshal(stats.Endpoints[0].Data, &data); err != nil {
			t.Fatalf("node %s STATS data %s: %v", node, stats.Endpoints[0].Data, err)
		}
		if data.Counters.Writes > 0 {
			wrote++
		}
		var st bus.NodeStatus
		before := time.Now().UnixNano()
		request(t, nc, "raidq.svc.status."+node, &st)
		after := time.Now().UnixNano()
		if st.Node != node || st.Cluster != "svc" || st.Incarnation == "" || st.Started.IsZero() || st.DiskBytes <= 0 || st.MaxPending <= 0 {
			t.Errorf("node %s status: %+v", node, st)
		}
		if st.Clock < before || st.Clock > after {
			t.Errorf("node %s clock %d outside the request [%d, %d]", node, st.Clock, before, after)
		}
		if st.Counters.Writes < data.Counters.Writes { // asked later: only more
			t.Errorf("node %s: status writes %d below STATS writes %d", node, st.Counters.Writes, data.Counters.Writes)
		}
	}
	if wrote < 4 {
		t.Errorf("STATS of only %d nodes counted writes", wrote)
	}
}

func request(t *testing.T, nc *nats.Conn, subject string, v any) {
	t.Helper()
	m, err := nc.Request(subject, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		t.Fatalf("%s: %s: %v", subject, m.Data, err)
	}
}

// TestClusterStatus: Status finds six healthy nodes of a listening cluster,
// five after one is killed (or six with the killed one "no answer" when it
// is expected), and none of a cluster that does not exist.
func TestClusterStatus(t *testing.T) {
	lc, nc := startListeningCluster(t, "st")
	ids := lc.NodeIDs()
	ctx := context.Background()
	// Expect: returns as soon as all six answered. SlowAfter is generous: a
	// loaded test machine must not turn health into "slow reply".
	nodes, err := actors.StatusWith(ctx, nc, "st", actors.StatusOptions{Expect: ids, Timeout: 10 * time.Second, SlowAfter: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 6 {
		t.Fatalf("%d nodes, want 6: %+v", len(nodes), nodes)
	}
	for i, n := range nodes {
		if n.Node != ids[i] || n.Health != bus.HealthOK || n.Instances != 1 || n.RTT <= 0 || n.DiskBytes <= 0 {
			t.Errorf("node %d: %+v", i, n)
		}
		if math.Abs(n.Skew.Seconds()) > 1 { // same machine, same clock
			t.Errorf("node %s: skew %v", n.Node, n.Skew)
		}
	}

	if err := lc.KillNode(5); err != nil {
		t.Fatal(err)
	}
	// Without Expect, discovery listens for the whole timeout.
	nodes, err = actors.StatusWith(ctx, nc, "st", actors.StatusOptions{Timeout: 1500 * time.Millisecond, SlowAfter: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 5 {
		t.Fatalf("after killing n5: %d nodes, want 5: %+v", len(nodes), nodes)
	}
	for _, n := range nodes {
		if n.Node == "n5" || n.Health != bus.HealthOK {
			t.Errorf("after killing n5: %+v", n)
		}
	}
	nodes, err = actors.StatusWith(ctx, nc, "st", actors.StatusOptions{Expect: ids, Timeout: time.Second, SlowAfter: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 6 || nodes[5].Node != "n5" || nodes[5].Health != bus.HealthNoAnswer || nodes[5].Error == "" {
		t.Fatalf("expecting n5 after its kill: %+v", nodes)
	}

	if _, err := actors.StatusWith(ctx, nc, "other", actors.StatusOptions{Timeout: 300 * time.Millisecond}); !errors.Is(err, actors.ErrNoNodes) {
		t.Fatalf("status of a cluster with no nodes: %v, want ErrNoNodes", err)
	}
}
