package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors/metrics"
)

// serveMetrics serves a process registry's metrics and /healthz on addr
// (a command's --metrics flag); "" serves nothing and returns a nil
// registry and a no-op stop.
func serveMetrics(addr string) (*prometheus.Registry, func(), error) {
	return serveMetricsReady(addr, nil)
}

// serveMetricsReady is serveMetrics whose /healthz answers 503 with
// ready's error until it returns nil (metrics.ReadyHandler).
func serveMetricsReady(addr string, ready func() error) (*prometheus.Registry, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	reg := metrics.NewProcessRegistry()
	stop, err := metrics.ServeMetricsReady(addr, reg, ready)
	if err != nil {
		return nil, nil, usageErr(fmt.Errorf("--metrics: %w", err))
	}
	return reg, stop, nil
}
