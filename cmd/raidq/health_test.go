package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors/metrics"
)

// runHealthCmd runs `raidq health args...` in this process and returns
// its stdout and error.
func runHealthCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCommand(healthCmd(), args...)
}

// nodeMetricsServer serves a registry holding the metrics of started
// nodes ids (none: a process whose node has not started).
func nodeMetricsServer(t *testing.T, ids ...string) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, id := range ids {
		if _, err := metrics.NewNode(reg, id, metrics.NodeGauges{Owners: func() float64 { return 0 }}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(metrics.Handler(reg))
	t.Cleanup(srv.Close)
	return srv
}

func TestHealthHealthyNode(t *testing.T) {
	srv := nodeMetricsServer(t, "n7")
	addr := strings.TrimPrefix(srv.URL, "http://")
	out, err := runHealthCmd(t, "--metrics-addr", addr)
	if err != nil || !strings.HasPrefix(out, "healthy: node n7 serving (http://"+addr+"/healthz, ") {
		t.Fatalf("healthy node: %v, output %q", err, out)
	}
	out, err = runHealthCmd(t, "--url", srv.URL, "--quiet") // no path: /healthz
	if err != nil || out != "" {
		t.Fatalf("--url without a path, --quiet: %v, output %q", err, out)
	}
	dev := nodeMetricsServer(t, "n0", "n1")
	out, err = runHealthCmd(t, "--url", dev.URL+"/healthz")
	if err != nil || !strings.HasPrefix(out, "healthy: nodes n0 n1 serving") {
		t.Fatalf("two nodes in one process: %v, output %q", err, out)
	}
}

func TestHealthNodeNotStarted(t *testing.T) {
	srv := nodeMetricsServer(t)
	_, err := runHealthCmd(t, "--url", srv.URL+"/healthz")
	if err == nil || !strings.Contains(err.Error(), "holds no started node's metrics") {
		t.Fatalf("no node metrics: %v, want a 'still starting' error", err)
	}
	out, err := runHealthCmd(t, "--url", srv.URL+"/healthz", "--any")
	if err != nil || !strings.HasPrefix(out, "healthy: serving") {
		t.Fatalf("--any: %v, output %q", err, out)
	}
}

// A node that finishes starting while --wait lasts is reported healthy:
// the first /metrics answer has no node, the next ones do.
func TestHealthWaitsForStart(t *testing.T) {
	started := nodeMetricsServer(t, "n3")
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" && asked.Add(1) == 1 {
			fmt.Fprintln(w, "# no node yet")
			return
		}
		started.Config.Handler.ServeHTTP(w, r)
	}))
	defer srv.Close()
	out, err := runHealthCmd(t, "--url", srv.URL+"/healthz", "--wait", "20s")
	if err != nil || !strings.HasPrefix(out, "healthy: node n3 serving") || asked.Load() < 2 {
		t.Fatalf("--wait: %v, output %q, /metrics asked %d times", err, out, asked.Load())
	}
}

func TestHealthFailures(t *testing.T) {
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "store failed", http.StatusServiceUnavailable)
	}))
	defer broken.Close()
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // answers nothing until the client gives up
	}))
	defer hung.Close()
	free := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", broken.URL + "/healthz"}, "answered 503 Service Unavailable: store failed"},
		{[]string{"--url", hung.URL + "/healthz", "--timeout", "200ms"}, "no answer from " + hung.URL + "/healthz within 200ms"},
		{[]string{"--metrics-addr", free}, "nothing listening at http://" + free + "/healthz"},
		{[]string{"--metrics-addr", free, "--wait", "1500ms"}, "(still, after waiting 1.5s)"},
		{[]string{"--metrics-addr", "nonsense"}, `--metrics-addr "nonsense": want host:port`},
		{[]string{"--url", "ftp://h/healthz"}, "want http://host:port/healthz"},
		{[]string{"--timeout", "0s"}, "want a positive timeout"},
	} {
		_, err := runHealthCmd(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("health %s: %v, want an error containing %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

func TestStartedNodes(t *testing.T) {
	text := `# HELP raidq_node_owners Slot-owner actors alive.
# TYPE raidq_node_owners gauge
raidq_node_owners{node="n2"} 3
raidq_node_owners{node="n0"} 0
raidq_node_owners_extra{node="x"} 1
raidq_node_pending_requests{node="n9"} 0
`
	if got := strings.Join(startedNodes(text), " "); got != "n0 n2" {
		t.Fatalf("startedNodes = %q, want \"n0 n2\"", got)
	}
}
