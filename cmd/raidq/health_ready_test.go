package main

import (
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors/metrics"
)

// TestHealthWaitsForEveryDevNode: a process whose /healthz says it is
// still starting (raidq dev before every node serves) is unhealthy even
// though one node's metrics are there, and healthy under --wait once it
// is ready. Before, health took the first started node for a healthy dev
// cluster and clients then found 3 of 6 nodes.
func TestHealthWaitsForEveryDevNode(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.NewNode(reg, "n0", metrics.NodeGauges{Owners: func() float64 { return 0 }}); err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	var asked atomic.Int32
	srv := httptest.NewServer(metrics.ReadyHandler(reg, func() error {
		if asked.Add(1) >= 3 {
			ready.Store(true)
		}
		if !ready.Load() {
			return errors.New("starting: not every node of the dev cluster serves yet")
		}
		return nil
	}))
	defer srv.Close()
	_, err := runHealthCmd(t, "--url", srv.URL+"/healthz")
	if err == nil || !strings.Contains(err.Error(), "starting: not every node") || exitCode(err) != exitFailure {
		t.Fatalf("starting dev cluster: %v (exit %d), want unhealthy, exit 1, saying it is starting", err, exitCode(err))
	}
	out, err := runHealthCmd(t, "--url", srv.URL+"/healthz", "--wait", "20s")
	if err != nil || !strings.HasPrefix(out, "healthy: node n0 serving") {
		t.Fatalf("--wait: %v, output %q", err, out)
	}
}

// TestHealthDegradedNode: a node past its disk watermark, or whose
// embedded JetStream is off, serves but is unhealthy (exit 1) with what
// needs an operator; below the watermark it is healthy.
func TestHealthDegradedNode(t *testing.T) {
	serve := func(used, js float64) string {
		reg := prometheus.NewRegistry()
		if _, err := metrics.NewNode(reg, "n4", metrics.NodeGauges{Owners: func() float64 { return 0 }, Funcs: []metrics.Func{
			{Name: "disk_used_ratio", F: func() float64 { return used }},
			{Name: "disk_watermark_ratio", F: func() float64 { return 0.9 }},
			{Name: "jetstream_enabled", F: func() float64 { return js }},
		}}); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(metrics.Handler(reg))
		t.Cleanup(srv.Close)
		return srv.URL + "/healthz"
	}
	if out, err := runHealthCmd(t, "--url", serve(0.5, 1)); err != nil || !strings.HasPrefix(out, "healthy: node n4 serving") {
		t.Fatalf("disk half full: %v %q", err, out)
	}
	_, err := runHealthCmd(t, "--url", serve(0.95, 0))
	if err == nil || exitCode(err) != exitFailure || !strings.Contains(err.Error(), "node n4: disk 95% full, past the 90% watermark") ||
		!strings.Contains(err.Error(), "JetStream is off") {
		t.Fatalf("disk full, JetStream off: %v (exit %d)", err, exitCode(err))
	}
}
