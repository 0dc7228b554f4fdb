// Package metrics holds raidq's Prometheus metrics: a storage node's
// (Node) and a client's (Client: producers and readers), and a small HTTP
// server for /metrics and /healthz.
//
// Every metric is registered in a registry the caller passes in, never in
// the global default registry: an in-process cluster runs six nodes in one
// process, each registering the same names under its own const label
// node=<id>. A nil *Node, *Client, *Producer or *Reader is valid and
// records nothing, so call sites need no checks when metrics are off.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace is the first part of every raidq metric name.
const Namespace = "raidq"

// LatencyBuckets are the histogram buckets of every latency, in seconds:
// 100µs doubling to about 6.5s.
var LatencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 17)

// WriteStatuses are the status label values of raidq_node_writes_total,
// created at zero when a node starts so that rates exist before the first
// event. (Other values, such as wrong_node, appear when first seen.)
var WriteStatuses = []string{"ok", "conflict", "sealed", "clock_ahead", "bad_request", "busy", "store_error"}

// NewProcessRegistry returns a registry holding the Go runtime and process
// collectors, for a process that serves one node or client (raidq node).
func NewProcessRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// NodeGauges are read on each scrape.
type NodeGauges struct {
	Pending   func() float64 // requests inside the node
	Owners    func() float64 // slot-owner actors alive
	DiskBytes func() float64 // bytes the store uses on disk (nil: not exported)
	// Funcs are further values read on each scrape (the node's repair,
	// scrub and retention counters).
	Funcs []Func
}

// Func is one metric read from a function on each scrape: a counter
// (monotonic) or a gauge.
type Func struct {
	Name, Help string
	Counter    bool
	F          func() float64
}

// Node is one storage node's metrics, each with the const label node=<id>.
type Node struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	writes       *prometheus.CounterVec
	writeLatency prometheus.Histogram
	commit       prometheus.Histogram
	scans        prometheus.Counter
	seals        prometheus.Counter
	floors       prometheus.Counter
}

// NewNode registers node's metrics in reg under the const label node=<id>.
// It fails if reg already holds a node of that id; Unregister removes them
// (a stopped node must, so that it can start again in the same process).
func NewNode(reg prometheus.Registerer, node string, g NodeGauges) (*Node, error) {
	if reg == nil {
		return nil, nil
	}
	m := &Node{reg: prometheus.WrapRegistererWith(prometheus.Labels{"node": node}, reg)}
	m.writes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "node", Name: "writes_total",
		Help: "Write requests answered, by the status of the answer."}, []string{"status"})
	m.writeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "node", Name: "write_duration_seconds",
		Help: "Time from a write request's arrival to its answer being sent (after fsync for an accepted write).", Buckets: LatencyBuckets})
	m.commit = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "node", Name: "store_commit_duration_seconds",
		Help: "Time from handing a batch to the slot store to its commit being durable (group commit and fsync).", Buckets: LatencyBuckets})
	m.scans = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "node", Name: "scans_total",
		Help: "Scan pages accepted (readers scanning slots)."})
	m.seals = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "node", Name: "seals_raised_total",
		Help: "Scans that raised and persisted a range's seal (sealing scans: readers before the read frontier, and tools)."})
	m.floors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "node", Name: "clock_floor_persists_total",
		Help: "Times the node made its clock floor durable ahead of its clock (closing scans; about 2/A per second when idle)."})
	cs := []prometheus.Collector{m.writes, m.writeLatency, m.commit, m.scans, m.seals, m.floors}
	gauge := func(name, help string, f func() float64) {
		if f != nil {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "node", Name: name, Help: help}, f))
		}
	}
	gauge("pending_requests", "Requests received and not yet answered.", g.Pending)
	gauge("owners", "Slot-owner actors alive (offset ranges being served).", g.Owners)
	gauge("disk_bytes", "Bytes the node's slot store uses on disk.", g.DiskBytes)
	for _, f := range g.Funcs {
		if f.Counter {
			cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "node", Name: f.Name, Help: f.Help}, f.F))
		} else {
			gauge(f.Name, f.Help, f.F)
		}
	}
	for _, s := range WriteStatuses {
		m.writes.WithLabelValues(s)
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			m.Unregister()
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("metrics of node " + node + " are already registered (two nodes with one id in one registry?)")
			}
			return nil, err
		}
		m.collectors = append(m.collectors, c)
	}
	return m, nil
}

// Unregister removes the node's metrics from the registry.
func (m *Node) Unregister() {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}

// Write counts one answered write request and its latency.
func (m *Node) Write(status string, d time.Duration) {
	if m == nil {
		return
	}
	m.writes.WithLabelValues(status).Inc()
	m.writeLatency.Observe(d.Seconds())
}

// Commit records one store commit's latency.
func (m *Node) Commit(d time.Duration) {
	if m == nil {
		return
	}
	m.commit.Observe(d.Seconds())
}

// Scan counts one accepted scan page.
func (m *Node) Scan() {
	if m != nil {
		m.scans.Inc()
	}
}

// FloorPersisted counts one durable raise of the clock floor.
func (m *Node) FloorPersisted() {
	if m != nil {
		m.floors.Inc()
	}
}

// SealRaised counts one persisted seal.
func (m *Node) SealRaised() {
	if m != nil {
		m.seals.Inc()
	}
}
