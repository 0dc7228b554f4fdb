package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kafka is a Kafka gateway's metrics (subsystem "kafka"). A nil *Kafka
// records nothing.
type Kafka struct {
	requests    *prometheus.CounterVec   // api, error
	latency     *prometheus.HistogramVec // api
	connections prometheus.Gauge
	sessions    prometheus.Gauge
	records     *prometheus.CounterVec // direction: produced, fetched
	authFails   prometheus.Counter
}

// NewKafka registers the gateway metrics in reg (nil reg: nil, no metrics).
func NewKafka(reg prometheus.Registerer) (*Kafka, error) {
	if reg == nil {
		return nil, nil
	}
	m := &Kafka{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "kafka", Name: "requests_total",
			Help: "Kafka requests answered, by API and error (\"\" for none; the first error code of the answer otherwise)."}, []string{"api", "error"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "kafka", Name: "request_duration_seconds",
			Help: "Time from reading a Kafka request to its answer (Fetch includes its long poll).", Buckets: LatencyBuckets}, []string{"api"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "kafka", Name: "connections",
			Help: "Open Kafka client connections."}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "kafka", Name: "read_sessions",
			Help: "Partition readers serving Kafka fetches."}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "kafka", Name: "records_total",
			Help: "Records produced (committed at W) and fetched through the gateway."}, []string{"direction"}),
		authFails: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "kafka", Name: "auth_failures_total",
			Help: "SASL authentications refused."}),
	}
	var err error
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.connections, m.sessions, m.records, m.authFails} {
		if _, rerr := register(reg, c); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Request counts one answered request.
func (m *Kafka) Request(api, errName string, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(api, errName).Inc()
	m.latency.WithLabelValues(api).Observe(d.Seconds())
}

// Connections moves the open-connection gauge by delta.
func (m *Kafka) Connections(delta int) {
	if m != nil {
		m.connections.Add(float64(delta))
	}
}

// Sessions moves the read-session gauge by delta.
func (m *Kafka) Sessions(delta int) {
	if m != nil {
		m.sessions.Add(float64(delta))
	}
}

// Records counts records produced or fetched.
func (m *Kafka) Records(direction string, n int) {
	if m != nil && n > 0 {
		m.records.WithLabelValues(direction).Add(float64(n))
	}
}

// AuthFailed counts one refused SASL authentication.
func (m *Kafka) AuthFailed() {
	if m != nil {
		m.authFails.Inc()
	}
}
