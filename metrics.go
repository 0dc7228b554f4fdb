package raidq

import "github.com/prometheus/client_golang/prometheus"

// WithMetrics records the client's producer and reader metrics in reg
// (raidq_producer_*, raidq_reader_*, labelled by topic); nil = none.
// Serve reg with metrics.ServeMetrics (package actors/metrics).
func WithMetrics(reg *prometheus.Registry) Option { return func(o *options) { o.metrics = reg } }
