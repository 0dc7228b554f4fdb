package metrics

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestNilMetricsRecordNothing(t *testing.T) {
	var n *Node
	n.Write("ok", time.Millisecond)
	n.Commit(time.Millisecond)
	n.Scan()
	n.SealRaised()
	n.Unregister()
	var c *Client
	c.Producer("t").Acked(3, time.Millisecond)
	c.Producer("t").Failed(1)
	c.Producer("t").Attempt(true, true)
	c.Producer("t").Conflict()
	c.Reader("t", 0).Applied(1, 1, 1, 1, 1, true)
	c.Reader("t", 0).Deferred(1, 1, 1)
	if m, err := NewNode(nil, "n0", NodeGauges{}); m != nil || err != nil {
		t.Fatalf("NewNode(nil) = %v, %v; want nil, nil", m, err)
	}
	if m, err := NewClient(nil); m != nil || err != nil {
		t.Fatalf("NewClient(nil) = %v, %v; want nil, nil", m, err)
	}
}

func TestNodesShareARegistryByLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	pending := 7.0
	a, err := NewNode(reg, "n0", NodeGauges{Pending: func() float64 { return pending }})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewNode(reg, "n1", NodeGauges{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewNode(reg, "n0", NodeGauges{}); err == nil || !strings.Contains(err.Error(), "n0") {
		t.Fatalf("second node n0 in one registry: err = %v, want an error naming n0", err)
	}
	a.Write("ok", time.Millisecond)
	a.Write("ok", time.Millisecond)
	b.Write("conflict", time.Millisecond)
	a.SealRaised()
	expect(t, reg, "raidq_node_writes_total", map[string]string{"node": "n0", "status": "ok"}, 2)
	expect(t, reg, "raidq_node_writes_total", map[string]string{"node": "n0", "status": "conflict"}, 0)
	expect(t, reg, "raidq_node_writes_total", map[string]string{"node": "n1", "status": "conflict"}, 1)
	expect(t, reg, "raidq_node_writes_total", map[string]string{"status": "busy"}, 0) // created at zero on both
	expect(t, reg, "raidq_node_write_duration_seconds", map[string]string{"node": "n0"}, 2)
	expect(t, reg, "raidq_node_seals_raised_total", map[string]string{"node": "n0"}, 1)
	expect(t, reg, "raidq_node_pending_requests", map[string]string{"node": "n0"}, 7)
	if _, found, _ := Sum(reg, "raidq_node_pending_requests", map[string]string{"node": "n1"}); found {
		t.Errorf("n1 has a pending gauge though it gave no function")
	}
	// A stopped node unregisters; the same id can then start again.
	a.Unregister()
	if _, err := NewNode(reg, "n0", NodeGauges{}); err != nil {
		t.Fatalf("restart n0 after Unregister: %v", err)
	}
}

func TestClientsShareMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c1, err := NewClient(reg)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := NewClient(reg)
	if err != nil {
		t.Fatalf("second client in one registry: %v", err)
	}
	c1.Producer("orders").Acked(3, time.Millisecond)
	c2.Producer("orders").Acked(2, time.Millisecond)
	c2.Producer("orders").Attempt(true, false)
	c1.Reader("orders", 0).Applied(5, 1, 0, 0, 2, true)
	orders := map[string]string{"topic": "orders"}
	expect(t, reg, "raidq_producer_records_total", map[string]string{"topic": "orders", "result": "acked"}, 5)
	expect(t, reg, "raidq_producer_stripe_attempts_total", orders, 1)
	expect(t, reg, "raidq_producer_stripe_retries_total", orders, 1)
	expect(t, reg, "raidq_producer_rewrites_total", orders, 0)
	expect(t, reg, "raidq_producer_ack_duration_seconds", orders, 2)
	expect(t, reg, "raidq_reader_deliveries_total", orders, 5)
	expect(t, reg, "raidq_reader_voids_total", orders, 1)
	expect(t, reg, "raidq_reader_duplicates_total", orders, 0)
	expect(t, reg, "raidq_reader_corrupt_shards_total", orders, 2)
	expect(t, reg, "raidq_reader_stalls_total", orders, 1)
}

// expect checks the sum of a metric over the series matching labels.
func expect(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	got, found, err := Sum(g, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	if !found || got != want {
		t.Errorf("%s%v = %v (found %v), want %v", name, labels, got, found, want)
	}
}

func TestServe(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewNode(reg, "n3", NodeGauges{})
	if err != nil {
		t.Fatal(err)
	}
	m.Write("ok", time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := Serve(ln, reg)
	defer stop()
	get := func(path string) string {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	if body := get("/metrics"); !strings.Contains(body, `raidq_node_writes_total{node="n3",status="ok"} 1`) {
		t.Fatalf("/metrics lacks the write counter:\n%s", body)
	}
	if body := get("/healthz"); strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz = %q", body)
	}
	if _, err := ServeMetrics(ln.Addr().String(), reg); err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("ServeMetrics on a taken port: err = %v, want one naming the address", err)
	}
}
