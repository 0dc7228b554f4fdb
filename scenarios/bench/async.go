package bench

import (
	"fmt"
	"io"
)

// AsyncFigures name the --async comparison (Report.Async): the same
// pipelined workload on both sides. Every publisher keeps Window sends
// outstanding without waiting for their acks: raidq's publishers call
// Producer.Produce on one shared producer, which packs what is
// outstanding into stripes (up to its batch cap, 256 KiB by default) and
// keeps stripes in flight while earlier ones await their acks (see
// --pipeline and --linger); JetStream's publishers call PublishAsync,
// one connection each. Latency is send→ack of each message. CPU is per
// acknowledged message, servers and this process together.
type AsyncFigures struct {
	Publishers int `json:"async_publishers"`
	Window     int `json:"async_window"`

	MsgsS            float64 `json:"async_msgs_s"`
	P50Ms            float64 `json:"async_p50_ms"`
	P99Ms            float64 `json:"async_p99_ms"`
	CPUUsPerMsg      float64 `json:"async_cpu_us_per_msg"`
	RecordsPerStripe float64 `json:"async_records_per_stripe,omitempty"`

	JSMsgsS       float64 `json:"js_async_msgs_s,omitempty"`
	JSP50Ms       float64 `json:"js_async_p50_ms,omitempty"`
	JSP99Ms       float64 `json:"js_async_p99_ms,omitempty"`
	JSCPUUsPerMsg float64 `json:"js_async_cpu_us_per_msg,omitempty"`

	// Ratio is raidq / JetStream msgs/s; CPURatio raidq / JetStream CPU
	// per message (0 without a JetStream run).
	Ratio    float64 `json:"async_ratio,omitempty"`
	CPURatio float64 `json:"async_cpu_ratio,omitempty"`
	Setup    string  `json:"setup"`
}

// asyncFigures returns the async figures of r, or nil unless cfg.Async
// and raidq ran.
func asyncFigures(cfg *Config, r *Report) *AsyncFigures {
	if !cfg.Async || r.Raidq == nil {
		return nil
	}
	q := r.Raidq
	a := &AsyncFigures{Publishers: cfg.Publishers, Window: cfg.Window, MsgsS: round3(q.ThroughputMsgsS),
		P50Ms: q.AckP50Ms, P99Ms: q.AckP99Ms, CPUUsPerMsg: perMsgUs(q.CPUS, q.Acked), RecordsPerStripe: round3(q.RecordsPerStripe),
		Setup: fmt.Sprintf("pipelined on both sides: %d publishers, each keeping %d sends outstanding; raidq: Producer.Produce on one "+
			"shared producer (stripes of what is outstanding, several in flight); JetStream: PublishAsync, one connection per publisher",
			cfg.Publishers, cfg.Window)}
	if j := r.JetStream; j != nil && j.Acked > 0 {
		a.JSMsgsS, a.JSP50Ms, a.JSP99Ms, a.JSCPUUsPerMsg = round3(j.ThroughputMsgsS), j.AckP50Ms, j.AckP99Ms, perMsgUs(j.CPUS, j.Acked)
		a.Ratio = ratioOf(a.MsgsS, a.JSMsgsS)
		a.CPURatio = ratioOf(a.CPUUsPerMsg, a.JSCPUUsPerMsg)
	}
	return a
}

// perMsgUs is s seconds of CPU per message of n, in µs (0 for none).
func perMsgUs(s float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return round3(s * 1e6 / float64(n))
}

// ratioOf is a / b rounded, 0 when b is 0.
func ratioOf(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round3(a / b)
}

// print writes the async line (nothing for nil).
func (a *AsyncFigures) print(w io.Writer) {
	if a == nil {
		return
	}
	fmt.Fprintf(w, "async (%s): raidq %.0f msgs/s, %.1f µs CPU/msg, %.1f records per stripe", a.Setup, a.MsgsS, a.CPUUsPerMsg,
		a.RecordsPerStripe)
	if a.JSMsgsS > 0 {
		fmt.Fprintf(w, "; JetStream %.0f msgs/s, %.1f µs CPU/msg; async_ratio %.2fx, async_cpu_ratio %.2fx", a.JSMsgsS, a.JSCPUUsPerMsg,
			a.Ratio, a.CPURatio)
	}
	fmt.Fprintln(w)
}
