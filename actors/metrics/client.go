package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Client is a client's producer and reader metrics, labelled by topic.
// Several clients may share one registry: the second finds the first's
// metrics registered and adds to them.
type Client struct {
	records                                *prometheus.CounterVec
	attempts, retries, conflicts, rewrites *prometheus.CounterVec
	ackLatency                             *prometheus.HistogramVec
	deliveries, voids, duplicates, inDoubt *prometheus.CounterVec
	corrupt, stalls, resolved, late        *prometheus.CounterVec
	inDoubtPending                         *prometheus.GaugeVec
	lag                                    *ConsumerLag
}

// NewClient registers the client metrics in reg (or reuses those a client
// registered there before). A nil reg gives a nil *Client: no metrics.
func NewClient(reg prometheus.Registerer) (*Client, error) {
	if reg == nil {
		return nil, nil
	}
	var err error
	counter := func(sub, name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: sub, Name: name, Help: help},
			append([]string{"topic"}, labels...))
		got, rerr := register(reg, v)
		if rerr != nil {
			err = errors.Join(err, rerr)
			return v
		}
		return got
	}
	m := &Client{}
	m.records = counter("producer", "records_total", "Records whose send finished, by result (acked: committed at W of n; failed).", "result")
	m.attempts = counter("producer", "stripe_attempts_total", "Stripe write attempts (each sends n shards at one offset).")
	m.retries = counter("producer", "stripe_retries_total", "Attempts at a fresh offset after an attempt could not commit (conflict, timeout, refusals).")
	m.conflicts = counter("producer", "conflicts_total", "CONFLICT answers: a node's slot already held another stripe's shard.")
	m.rewrites = counter("producer", "rewrites_total", "Committed stripes written once more elsewhere because their commit met a conflict.")
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "producer", Name: "ack_duration_seconds",
		Help:    "Time from a batch's first record to the stripe's acknowledgement (one observation per stripe).",
		Buckets: LatencyBuckets}, []string{"topic"})
	if got, rerr := register(reg, hv); rerr != nil {
		err = errors.Join(err, rerr)
	} else {
		m.ackLatency = got
	}
	m.deliveries = counter("reader", "deliveries_total", "Records delivered to consumers.")
	m.voids = counter("reader", "voids_total", "Stripe copies skipped as never committed (too few shards anywhere: a failed attempt).")
	m.duplicates = counter("reader", "duplicates_total", "Stripes skipped as already delivered (a retried or rewritten stripe).")
	m.inDoubt = counter("reader", "in_doubt_total", "Offsets passed after waiting for unheard nodes (possibly committed, not decodable); each is kept and re-asked until resolved.")
	m.resolved = counter("reader", "in_doubt_resolved_total", "In-doubt offsets settled later: delivered late, proven void, or found committed elsewhere.")
	m.late = counter("reader", "late_deliveries_total", "Records delivered late, from an in-doubt offset that became decodable.")
	gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "reader", Name: "in_doubt_pending",
		Help: "In-doubt offsets a reader passed and still watches (a group never commits past the lowest)."}, []string{"topic", "partition"})
	if got, rerr := register(reg, gv); rerr != nil {
		err = errors.Join(err, rerr)
	} else {
		m.inDoubtPending = got
	}
	m.corrupt = counter("reader", "corrupt_shards_total", "Shards that failed their checks and were treated as missing.")
	m.stalls = counter("reader", "stalls_total", "Scans that could not be used because too few nodes answered.")
	if got, rerr := register(reg, newConsumerLag()); rerr != nil {
		err = errors.Join(err, rerr)
	} else {
		m.lag = got
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c or returns the collector of the same shape already there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register client metrics: %w", err)
}

// Producer is one producer's metrics (children of one topic).
type Producer struct {
	acked, failed, attempts, retries, conflicts, rewrites prometheus.Counter
	ack                                                   prometheus.Observer
}

// Producer returns the metrics of a producer of topic (nil if m is nil).
func (m *Client) Producer(topic string) *Producer {
	if m == nil {
		return nil
	}
	return &Producer{
		acked: m.records.WithLabelValues(topic, "acked"), failed: m.records.WithLabelValues(topic, "failed"),
		attempts: m.attempts.WithLabelValues(topic), retries: m.retries.WithLabelValues(topic),
		conflicts: m.conflicts.WithLabelValues(topic), rewrites: m.rewrites.WithLabelValues(topic),
		ack: m.ackLatency.WithLabelValues(topic),
	}
}

// Acked counts records acknowledged in one stripe and the stripe's latency.
func (p *Producer) Acked(records int, d time.Duration) {
	if p == nil {
		return
	}
	p.acked.Add(float64(records))
	p.ack.Observe(d.Seconds())
}

// Failed counts records whose send failed.
func (p *Producer) Failed(records int) {
	if p != nil {
		p.failed.Add(float64(records))
	}
}

// Attempt counts one stripe attempt; retry says it was a retry at a fresh
// offset, rewrite that it rewrites a committed stripe (docs/design.md#write-path step 7).
func (p *Producer) Attempt(retry, rewrite bool) {
	if p == nil {
		return
	}
	p.attempts.Inc()
	if retry {
		p.retries.Inc()
	}
	if rewrite {
		p.rewrites.Inc()
	}
}

// Conflict counts one CONFLICT answer.
func (p *Producer) Conflict() {
	if p != nil {
		p.conflicts.Inc()
	}
}

// Reader is one reader's metrics (children of one topic).
type Reader struct {
	deliveries, voids, duplicates, inDoubt, corrupt, stalls, resolved, late prometheus.Counter
	pending                                                                 prometheus.Gauge
}

// Reader returns the metrics of a reader of one partition of topic (nil
// if m is nil).
func (m *Client) Reader(topic string, partition int) *Reader {
	if m == nil {
		return nil
	}
	return &Reader{
		deliveries: m.deliveries.WithLabelValues(topic), voids: m.voids.WithLabelValues(topic),
		duplicates: m.duplicates.WithLabelValues(topic), inDoubt: m.inDoubt.WithLabelValues(topic),
		corrupt: m.corrupt.WithLabelValues(topic), stalls: m.stalls.WithLabelValues(topic),
		resolved: m.resolved.WithLabelValues(topic), late: m.late.WithLabelValues(topic),
		pending: m.inDoubtPending.WithLabelValues(topic, fmt.Sprint(partition)),
	}
}

// Deferred records a reader's unresolved in-doubt offsets, those it
// settled, and its late deliveries.
func (r *Reader) Deferred(pending, resolved, late int) {
	if r == nil {
		return
	}
	r.pending.Set(float64(pending))
	if resolved > 0 {
		r.resolved.Add(float64(resolved))
	}
	if late > 0 {
		r.late.Add(float64(late))
	}
}

// Applied counts what one application of a scan produced.
func (r *Reader) Applied(deliveries, voids, duplicates, inDoubt, corrupt int, stalled bool) {
	if r == nil {
		return
	}
	add := func(c prometheus.Counter, n int) {
		if n > 0 {
			c.Add(float64(n))
		}
	}
	add(r.deliveries, deliveries)
	add(r.voids, voids)
	add(r.duplicates, duplicates)
	add(r.inDoubt, inDoubt)
	add(r.corrupt, corrupt)
	if stalled {
		r.stalls.Inc()
	}
}

// ConsumerLagName is the consumer lag gauge's name; alert rules query it.
const ConsumerLagName = Namespace + "_consumer_lag_seconds"

// LagSource reports one consumer's lag: emit once per partition it reads,
// with its group ("" for none) and how many seconds its reader trails the
// readable frontier. It is called on each scrape and must not block.
type LagSource func(emit func(topic string, partition int, group string, seconds float64))

// ConsumerLag is the gauge raidq_consumer_lag_seconds{topic, partition,
// group}, computed on each scrape from the consumers that registered a
// LagSource, so it is as fresh as their readers and a consumer's series
// vanish when it closes or a group member's partition moves away (the
// labels stay bounded: no member id). Where two consumers of one process
// read the same partition for the same group (or without one), the series
// shows the larger lag.
type ConsumerLag struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	next    uint64
	sources map[uint64]LagSource
}

func newConsumerLag() *ConsumerLag {
	return &ConsumerLag{sources: make(map[uint64]LagSource), desc: prometheus.NewDesc(ConsumerLagName,
		"Seconds a consumer's partition reader trails the readable frontier (now minus the topic's read delay); "+
			"group is empty for a consumer outside a group.", []string{"topic", "partition", "group"}, nil)}
}

// ConsumerLag is the client's lag gauge (nil if m is nil: no metrics).
func (m *Client) ConsumerLag() *ConsumerLag {
	if m == nil {
		return nil
	}
	return m.lag
}

// Add registers a consumer's source until remove is called (a nil l
// records nothing).
func (l *ConsumerLag) Add(src LagSource) (remove func()) {
	if l == nil || src == nil {
		return func() {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.next
	l.next++
	l.sources[id] = src
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.sources, id)
	}
}

// Describe implements prometheus.Collector.
func (l *ConsumerLag) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

// Collect implements prometheus.Collector: one sample per (topic,
// partition, group), the largest any source reported.
func (l *ConsumerLag) Collect(ch chan<- prometheus.Metric) {
	type key struct {
		topic, group string
		partition    int
	}
	l.mu.Lock()
	srcs := make([]LagSource, 0, len(l.sources))
	for _, s := range l.sources {
		srcs = append(srcs, s)
	}
	l.mu.Unlock()
	lags := make(map[key]float64)
	for _, src := range srcs {
		src(func(topic string, partition int, group string, seconds float64) {
			k := key{topic, group, partition}
			if old, ok := lags[k]; !ok || seconds > old {
				lags[k] = seconds
			}
		})
	}
	for k, v := range lags {
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, v, k.topic, strconv.Itoa(k.partition), k.group)
	}
}
