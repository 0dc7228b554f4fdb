package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The read modes' building blocks: stamped messages, a sender that paces
// them, sinks that record their deliveries, the warm-up that makes sure
// every reader is live, and a CPU meter for one phase.

// A read-mode message carries, big endian, the time it was sent (unix ns)
// in bytes 0..7 and its index in bytes 8..15; the rest is random. A
// warm-up message has warmBit set in its index. (Catch-up backlogs are
// the publishing workload's messages: the index in bytes 0..7, no time.)
const warmBit = uint64(1) << 63

// Bounds of the read modes' waits: readers must be live within
// readyTimeout; a catch-up read that makes no progress for stallTimeout
// ends with what it read.
const (
	readyTimeout = 60 * time.Second
	stallTimeout = 30 * time.Second
)

// stampedMessage is message idx of size bytes, stamped with the time now.
func stampedMessage(size int, idx uint64) []byte {
	m := randomBytes(size, idx)
	binary.BigEndian.PutUint64(m[8:], idx)
	binary.BigEndian.PutUint64(m, uint64(time.Now().UnixNano()))
	return m
}

// deliverySink records one reader's deliveries of the messages
// base..base+n-1: which arrived, how many twice, and (stamped) each
// one's send→delivery latency. It is safe for concurrent use.
type deliverySink struct {
	stamped bool
	base    uint64

	mu      sync.Mutex
	seen    []bool
	got     int
	expect  int
	dups    int
	hist    *hdrhistogram.Histogram // µs
	last    time.Time               // when the latest new message arrived
	warm    uint64                  // highest warm-up index seen
	warmCh  chan struct{}           // closed and replaced when warm rises
	done    chan struct{}           // closed once got reaches expect
	doneSet bool
}

func newSink(stamped bool, base uint64, n int) *deliverySink {
	return &deliverySink{stamped: stamped, base: base, seen: make([]bool, n), expect: n,
		hist:   hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3),
		warmCh: make(chan struct{}), done: make(chan struct{})}
}

// observe records the delivery at now of a message whose value is v.
// Messages of other phases, and values too short to be the bench's, are
// ignored.
func (s *deliverySink) observe(v []byte, now time.Time) {
	if len(v) < 16 {
		return
	}
	idx := binary.BigEndian.Uint64(v)
	if s.stamped {
		idx = binary.BigEndian.Uint64(v[8:])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if idx&warmBit != 0 {
		if w := idx &^ warmBit; w > s.warm {
			s.warm = w
			close(s.warmCh)
			s.warmCh = make(chan struct{})
		}
		return
	}
	if idx < s.base || idx-s.base >= uint64(len(s.seen)) {
		return
	}
	i := idx - s.base
	if s.seen[i] {
		s.dups++
		return
	}
	s.seen[i] = true
	s.got++
	s.last = now
	if s.stamped {
		lat := now.UnixNano() - int64(binary.BigEndian.Uint64(v))
		_ = s.hist.RecordValue(max(1, lat/1000))
	}
	s.checkDone()
}

// checkDone closes done once got reaches expect; s.mu is held.
func (s *deliverySink) checkDone() {
	if !s.doneSet && s.got >= s.expect {
		s.doneSet = true
		close(s.done)
	}
}

// setExpect makes done close once n messages arrived (fewer than sent
// when some sends failed).
func (s *deliverySink) setExpect(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expect = n
	s.checkDone()
}

// waitWarm waits until the sink saw warm-up message k or later; false if
// deadline passed or ctx ended first.
func (s *deliverySink) waitWarm(ctx context.Context, k uint64, deadline time.Time) bool {
	for {
		s.mu.Lock()
		ok, ch := s.warm >= k, s.warmCh
		s.mu.Unlock()
		if ok {
			return true
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-ch:
			t.Stop()
		case <-t.C:
			return false
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// waitDone waits until every expected message arrived, ctx ends or,
// when stall > 0, no new message arrived for stall, or, when deadline is
// set, until deadline. It reports whether every expected message arrived.
func (s *deliverySink) waitDone(ctx context.Context, deadline time.Time, stall time.Duration) bool {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var until <-chan time.Time // nil: no deadline
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		until = t.C
	}
	last, lastAt := -1, time.Now()
	for {
		select {
		case <-s.done: // first: done wins over a deadline that has passed too
			return true
		default:
		}
		select {
		case <-s.done:
			return true
		case <-ctx.Done():
			return false
		case <-until:
			return false
		case <-tick.C:
			if got := s.count(); got != last {
				last, lastAt = got, time.Now()
			} else if stall > 0 && time.Since(lastAt) > stall {
				return false
			}
		}
	}
}

// count is how many distinct measured messages arrived.
func (s *deliverySink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

// lastAt is when the latest new measured message arrived (zero: none).
func (s *deliverySink) lastAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// put adds the sink's figures under prefix: delivered, lost (acked by
// st but never delivered; without st, expected but not delivered),
// duplicates and, stamped, the send→delivery p50/p99/p99.9/max in ms.
func (s *deliverySink) put(fig map[string]float64, prefix string, st *sendStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lost := s.lost(st)
	fig[prefix+"delivered"] = float64(s.got)
	fig[prefix+"lost"] = float64(lost)
	fig[prefix+"duplicates"] = float64(s.dups)
	if s.stamped && s.got > 0 {
		ms := func(q float64) float64 { return float64(s.hist.ValueAtQuantile(q)) / 1000 }
		fig[prefix+"p50_ms"], fig[prefix+"p99_ms"], fig[prefix+"p999_ms"] = ms(50), ms(99), ms(99.9)
		fig[prefix+"max_ms"] = float64(s.hist.Max()) / 1000
	}
}

// lost is how many messages acked by st never arrived (without st: how
// many expected); s.mu is held.
func (s *deliverySink) lost(st *sendStats) int {
	if st == nil {
		return max(0, s.expect-s.got)
	}
	n := 0
	for i, ok := range st.acked {
		if ok && !s.seen[i] {
			n++
		}
	}
	return n
}

// merge adds the sink's latencies to h; it returns how many messages
// arrived and how many acked by st did not.
func (s *deliverySink) merge(h *hdrhistogram.Histogram, st *sendStats) (delivered, lost int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.Merge(s.hist)
	return s.got, s.lost(st)
}

// sendStats is the outcome of one sendPaced.
type sendStats struct {
	mu         sync.Mutex
	acked      []bool // by index - base
	nAcked     int
	failed     int
	firstErr   string
	start, end time.Time
}

func (st *sendStats) outcome(i int, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.failed++
		if st.firstErr == "" {
			st.firstErr = err.Error()
		}
		return
	}
	st.acked[i] = true
	st.nAcked++
}

// put adds the sender's figures under prefix: sent, acked, send_failed
// and the rate the messages went out at (msgs/s).
func (st *sendStats) put(fig map[string]float64, prefix string) {
	fig[prefix+"sent"] = float64(len(st.acked))
	fig[prefix+"acked"] = float64(st.nAcked)
	fig[prefix+"send_failed"] = float64(st.failed)
	if d := st.end.Sub(st.start).Seconds(); d > 0 {
		fig[prefix+"send_msgs_s"] = round3(float64(len(st.acked)) / d)
	}
}

// sendPaced sends the stamped messages base..base+n-1 through t: with
// rate 0 one at a time, each waiting for its ack; else rate per second
// on a fixed schedule, burst messages at a time (the first burst at
// once, the next burst/rate seconds later), without waiting for acks (a
// send that falls behind goes at once), then it waits for every outcome.
// A failed send is not retried (it counts in failed; lost counts only
// acked messages).
func sendPaced(ctx context.Context, t target, size int, base uint64, n int, rate float64, burst int) *sendStats {
	burst = max(burst, 1)
	st := &sendStats{acked: make([]bool, n), start: time.Now()}
	var wg sync.WaitGroup
	for i := range n {
		if ctx.Err() != nil {
			st.outcome(i, ctx.Err())
			continue
		}
		if rate == 0 {
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			st.outcome(i, t.send(actx, 0, stampedMessage(size, base+uint64(i))))
			cancel()
			continue
		}
		if i%burst == 0 {
			sleepUntil(ctx, st.start.Add(time.Duration(float64(i)*float64(time.Second)/rate)))
		}
		wg.Add(1)
		t.sendAsync(0, stampedMessage(size, base+uint64(i)), func(err error) { st.outcome(i, err); wg.Done() })
	}
	wg.Wait()
	st.end = time.Now()
	return st
}

// sleepUntil sleeps until at (not at all if it has passed) or ctx ends.
func sleepUntil(ctx context.Context, at time.Time) {
	d := time.Until(at)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// warmReaders makes sure every sink's reader is live: it sends warm-up
// messages one at a time (a new one every 100 ms while waiting) until
// every sink has seen one, then one more, and waits until every sink has
// seen that one too, so what was in flight before has drained (readers
// deliver in order). It fails after readyTimeout.
func warmReaders(ctx context.Context, t target, size int, sinks []*deliverySink) error {
	if len(sinks) == 0 {
		return nil
	}
	deadline := time.Now().Add(readyTimeout)
	var k uint64
	var lastErr error
	for !allWarm(ctx, sinks, 1, time.Now()) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("readers not live after %v (%d of %d saw a warm-up message)", readyTimeout,
				warmCount(ctx, sinks), len(sinks)), lastErr, ctx.Err())
		}
		k++
		if err := sendWarm(ctx, t, size, k); err != nil {
			lastErr = err
		}
		allWarm(ctx, sinks, 1, time.Now().Add(100*time.Millisecond))
	}
	k++
	if err := sendWarm(ctx, t, size, k); err != nil {
		return fmt.Errorf("warm-up send: %w", err)
	}
	if !allWarm(ctx, sinks, k, deadline) {
		return fmt.Errorf("readers did not drain the warm-up within %v", readyTimeout)
	}
	return nil
}

func sendWarm(ctx context.Context, t target, size int, k uint64) error {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	return t.send(actx, 0, stampedMessage(size, warmBit|k))
}

// allWarm waits until every sink saw warm-up message k, or deadline.
func allWarm(ctx context.Context, sinks []*deliverySink, k uint64, deadline time.Time) bool {
	for _, s := range sinks {
		if !s.waitWarm(ctx, k, deadline) {
			return false
		}
	}
	return true
}

func warmCount(ctx context.Context, sinks []*deliverySink) int {
	n := 0
	for _, s := range sinks {
		if s.waitWarm(ctx, 1, time.Now()) {
			n++
		}
	}
	return n
}

// waitAll waits, until deadline, for every sink's expected messages.
func waitAll(ctx context.Context, sinks []*deliverySink, deadline time.Time) {
	for _, s := range sinks {
		s.waitDone(ctx, deadline, 0)
	}
}

// cpuMeter is the CPU time of some server processes and of this process
// over one phase.
type cpuMeter struct {
	procs []*tracked
	self  *tracked
}

// startCPU takes the first sample of procs (fresh trackers) and of this process.
func startCPU(procs []*tracked) *cpuMeter {
	m := &cpuMeter{procs: procs, self: &tracked{pid: os.Getpid()}}
	for _, p := range procs {
		p.begin()
	}
	m.self.begin()
	return m
}

// stop takes the last sample; it returns the servers' CPU seconds (all
// of procs together) and this process's.
func (m *cpuMeter) stop() (server, client float64) {
	m.self.finish()
	for _, p := range m.procs {
		p.finish()
		server += p.stat().CPUS
	}
	return server, m.self.stat().CPUS
}
