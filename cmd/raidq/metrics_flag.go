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
	if addr == "" {
		return nil, func() {}, nil
	}
	reg := metrics.NewProcessRegistry()
	stop, err := metrics.ServeMetrics(addr, reg)
	if err != nil {
		return nil, nil, usageErr(fmt.Errorf("--metrics: %w", err))
	}
	return reg, stop, nil
}
