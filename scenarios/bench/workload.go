package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// target is one system under test, seen by the publishers.
type target interface {
	// send publishes msg for publisher pub and blocks until it is
	// acknowledged (stored as the system promises) or fails.
	send(ctx context.Context, pub int, msg []byte) error
	// sendAsync publishes msg and calls done once with the outcome; done
	// must not block.
	sendAsync(pub int, msg []byte, done func(error))
}

// Per-attempt and total bounds of one message: a publish that fails (or
// is not acknowledged within attemptTimeout) is retried after retryPause
// until it is acknowledged or retryFor has passed since its first attempt.
// Latency is measured from the first attempt, so a failover shows as
// latency and as a gap without acks, never as lost messages.
const (
	attemptTimeout = 5 * time.Second
	retryPause     = 5 * time.Millisecond
	retryFor       = 60 * time.Second
)

// ackSample is one acknowledged message: when (since the workload
// started) and how long it took.
type ackSample struct {
	At, Latency time.Duration
}

// recorder collects the outcome of every message of one workload.
type recorder struct {
	start time.Time

	mu       sync.Mutex
	hist     *hdrhistogram.Histogram // microseconds
	acks     []ackSample
	failed   int
	retries  int
	firstErr string

	acked  atomic.Int64
	half   int64
	onHalf func()
	once   sync.Once
}

func newRecorder(total int, onHalf func()) *recorder {
	return &recorder{hist: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3),
		half: int64(total / 2), onHalf: onHalf}
}

func (r *recorder) ack(t0 time.Time) {
	now := time.Now()
	r.mu.Lock()
	_ = r.hist.RecordValue(max(1, now.Sub(t0).Microseconds()))
	r.acks = append(r.acks, ackSample{At: now.Sub(r.start), Latency: now.Sub(t0)})
	r.mu.Unlock()
	if r.acked.Add(1) == max(r.half, 1) && r.onHalf != nil {
		r.once.Do(func() { go r.onHalf() })
	}
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed++
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

func (r *recorder) retry(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries++
	if r.firstErr == "" {
		r.firstErr = "(retried) " + err.Error()
	}
}

// workload is the publishers' side of one run.
type workload struct {
	messages, size, publishers int
	async                      bool
	window                     int
}

// message builds message i: its index, then pseudo-random bytes (seeded
// by i) up to size. Every message differs and none compresses, so a store
// that compresses (LevelDB tables do, with snappy) cannot look smaller
// than it is.
func (w *workload) message(i int, _ []byte) []byte {
	m := randomBytes(w.size, uint64(i))
	binary.BigEndian.PutUint64(m, uint64(i))
	return m
}

// randomBytes returns size pseudo-random bytes seeded by seed.
func randomBytes(size int, seed uint64) []byte {
	m := make([]byte, size)
	rnd := rand.NewPCG(seed, 0x9e3779b97f4a7c15)
	for j := 0; j < len(m); j += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], rnd.Uint64())
		copy(m[j:], b[:])
	}
	return m
}

// run drives the publishers until every message is acknowledged or has
// failed, and returns the recorder.
func (w *workload) run(ctx context.Context, t target, onHalf func()) *recorder {
	rec := newRecorder(w.messages, onHalf)
	w.runWith(ctx, t, rec)
	return rec
}

// runWith is run with a recorder made by the caller.
func (w *workload) runWith(ctx context.Context, t target, rec *recorder) {
	var pad []byte // unused: every message is fresh random bytes
	var next atomic.Int64
	var wg sync.WaitGroup
	rec.start = time.Now()
	for p := range w.publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w.async {
				w.publishAsync(ctx, t, p, &next, pad, rec)
			} else {
				w.publishSync(ctx, t, p, &next, pad, rec)
			}
		}()
	}
	wg.Wait()
}

func (w *workload) publishSync(ctx context.Context, t target, p int, next *atomic.Int64, pad []byte, rec *recorder) {
	for {
		i := int(next.Add(1) - 1)
		if i >= w.messages || ctx.Err() != nil {
			return
		}
		msg := w.message(i, pad)
		t0 := time.Now()
		for {
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			err := t.send(actx, p, msg)
			cancel()
			if err == nil {
				rec.ack(t0)
				break
			}
			if time.Since(t0) > retryFor || ctx.Err() != nil {
				rec.fail(err)
				break
			}
			rec.retry(err)
			time.Sleep(retryPause)
		}
	}
}

func (w *workload) publishAsync(ctx context.Context, t target, p int, next *atomic.Int64, pad []byte, rec *recorder) {
	sem := make(chan struct{}, w.window)
	var pending sync.WaitGroup
	defer pending.Wait()
	for {
		i := int(next.Add(1) - 1)
		if i >= w.messages {
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		msg := w.message(i, pad)
		t0 := time.Now()
		pending.Add(1)
		var attempt func()
		attempt = func() {
			t.sendAsync(p, msg, func(err error) {
				switch {
				case err == nil:
					rec.ack(t0)
				case time.Since(t0) <= retryFor && ctx.Err() == nil:
					rec.retry(err)
					time.AfterFunc(retryPause, attempt)
					return
				default:
					rec.fail(err)
				}
				<-sem
				pending.Done()
			})
		}
		attempt()
	}
}

// Result is one system's measurements.
type Result struct {
	System     string `json:"system"`
	Setup      string `json:"setup"`
	Messages   int    `json:"messages"`
	Acked      int    `json:"acked"`
	Failed     int    `json:"failed"`
	Retries    int    `json:"retries"`
	FirstError string `json:"first_error,omitempty"`

	ThroughputMsgsS float64 `json:"throughput_msgs_s"`
	ThroughputMBS   float64 `json:"throughput_mb_s"`
	AckP50Ms        float64 `json:"ack_p50_ms"`
	AckP99Ms        float64 `json:"ack_p99_ms"`
	AckP999Ms       float64 `json:"ack_p999_ms"`
	AckMaxMs        float64 `json:"ack_max_ms"`
	LongestAckGapMs float64 `json:"longest_ack_gap_ms"`
	// TopGaps are the five longest gaps without an ack: [start ms since
	// the workload started, length ms].
	TopGaps [][2]float64 `json:"top_gaps,omitempty"`
	// KillGapMs is the longest gap without an ack that overlaps the five
	// seconds after the kill: the kill's own cost, apart from the stalls
	// any run has (0 without --kill).
	KillGapMs float64 `json:"kill_gap_ms,omitempty"`
	// DiskBytesPerPayloadByte is du of the servers' data directories after
	// the run over the payload bytes acknowledged (warm-up included).
	DiskBytesPerPayloadByte float64 `json:"disk_bytes_per_payload_byte"`
	DiskBytes               int64   `json:"disk_bytes"`

	// CPUS is the CPU time of the server processes and of the benchmark
	// process (the client) during the workload.
	CPUS       float64 `json:"cpu_s"`
	ServerCPUS float64 `json:"server_cpu_s"`
	ClientCPUS float64 `json:"client_cpu_s"`
	// PeakRSSMB is the largest peak RSS of one server process;
	// TotalRSSMB the sum over the server processes.
	// OtherCPUS is the CPU time the rest of the machine used during the
	// workload (noise: other processes competing for the same cores).
	OtherCPUS  float64    `json:"other_cpu_s"`
	PeakRSSMB  float64    `json:"peak_rss_mb"`
	TotalRSSMB float64    `json:"total_rss_mb"`
	Processes  []ProcStat `json:"processes"`

	// Stripes is how many stripe write attempts raidq's producer made
	// (each sends n shards); RecordsPerStripe the average batch size.
	Stripes          int     `json:"stripes,omitempty"`
	RecordsPerStripe float64 `json:"records_per_stripe,omitempty"`

	Killed   []string `json:"killed,omitempty"`
	KillAtMs float64  `json:"kill_at_ms,omitempty"`
	Slow     []string `json:"slow,omitempty"`
	Seconds  float64  `json:"seconds"`

	acks []ackSample
	hist *hdrhistogram.Histogram
}

// summarize fills the latency, throughput and gap fields from rec.
func (res *Result) summarize(rec *recorder, size int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	res.Acked, res.Failed, res.Retries, res.FirstError = len(rec.acks), rec.failed, rec.retries, rec.firstErr
	res.hist, res.acks = rec.hist, rec.acks
	ms := func(us int64) float64 { return float64(us) / 1000 }
	res.AckP50Ms = ms(rec.hist.ValueAtQuantile(50))
	res.AckP99Ms = ms(rec.hist.ValueAtQuantile(99))
	res.AckP999Ms = ms(rec.hist.ValueAtQuantile(99.9))
	res.AckMaxMs = ms(rec.hist.Max())
	sort.Slice(res.acks, func(i, j int) bool { return res.acks[i].At < res.acks[j].At })
	var gaps [][2]float64
	for i := 1; i < len(res.acks); i++ {
		if g := res.acks[i].At - res.acks[i-1].At; g > time.Millisecond {
			gaps = append(gaps, [2]float64{msOf(res.acks[i-1].At), msOf(g)})
		}
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i][1] > gaps[j][1] })
	if res.KillAtMs > 0 {
		for _, g := range gaps {
			if g[0]+g[1] >= res.KillAtMs && g[0] <= res.KillAtMs+5000 {
				res.KillGapMs = g[1] // the longest, since gaps are sorted
				break
			}
		}
	}
	if len(gaps) > 0 {
		res.LongestAckGapMs = gaps[0][1]
	}
	res.TopGaps = gaps[:min(5, len(gaps))]
	if n := len(res.acks); n > 0 {
		// From the start of the workload to the last ack.
		d := res.acks[n-1].At.Seconds()
		res.Seconds = d
		if d > 0 {
			res.ThroughputMsgsS = float64(n) / d
			res.ThroughputMBS = float64(n) * float64(size) / d / 1e6
		}
	}
}

// addProcs fills the CPU and memory fields from the tracked server
// processes and the client's own CPU time.
func (res *Result) addProcs(procs []*tracked, client, machine time.Duration) {
	for _, t := range procs {
		s := t.stat()
		res.Processes = append(res.Processes, s)
		res.ServerCPUS += s.CPUS
		res.PeakRSSMB = max(res.PeakRSSMB, s.PeakRSSMB)
		res.TotalRSSMB += s.PeakRSSMB
	}
	res.ClientCPUS = client.Seconds()
	res.CPUS = res.ServerCPUS + res.ClientCPUS
	if machine > 0 {
		res.OtherCPUS = max(0, machine.Seconds()-res.CPUS)
	}
}

func (res *Result) setDisk(bytes int64, payload int64) {
	res.DiskBytes = bytes
	if payload > 0 {
		res.DiskBytesPerPayloadByte = float64(bytes) / float64(payload)
	}
}

func (res *Result) String() string {
	return fmt.Sprintf("%s: %d acked, %.0f msgs/s, p50 %.2f ms, p99 %.2f ms", res.System, res.Acked,
		res.ThroughputMsgsS, res.AckP50Ms, res.AckP99Ms)
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
