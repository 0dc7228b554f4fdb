package sim

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"testing/synctest"
	"time"
)

// Shipped drivers in the simulation. A driver that ships (the fan-out
// lease holder of actors/fanout, lease.go) runs here as it runs in a
// node: its goroutines, tickers, timers and contexts unchanged, inside a
// testing/synctest bubble whose fake clock is the simulation's true time.
// It reaches the world only through ports (the KV, its readers, the bus)
// whose simulated implementations hand each call to the event loop.
//
// The loop and the drivers take turns, so a seed replays:
//   - settle: the loop waits (synctest.Wait) until every driver goroutine
//     is blocked, then runs the port calls they made meanwhile in the
//     order (caller, the caller's call number), never in the order the Go
//     scheduler happened to run them. A call draws its delays from the
//     simulation's one random source, as the simulated actors' messages do.
//   - advance: to reach the next event's time the loop sleeps in the
//     bubble, so every driver timer due before it fires first; a port call
//     made meanwhile wakes the loop at that instant, which settles it.
//
// What is not deterministic: a driver's select with two cases ready at
// the same instant, which Go picks at random. The drivers' timers run on
// their own spans, drawn from the seed, so in practice this happens at
// few instants (TestSimDeterministic checks lease seeds replay).
type bubble struct {
	base  time.Time // the bubble's time at epoch0
	mu    sync.Mutex
	calls []portCall // made since the last settle
	wake  chan struct{}
	wg    sync.WaitGroup // driver shutdowns the run waits for before it returns
}

// portCall is one call a driver made through a simulated port.
type portCall struct {
	who string // the caller (a driver incarnation)
	seq uint64 // its call number; log lines come after its calls
	key string // a log line's text: lines of one instant by text
	fn  func() // runs on the loop
}

func newBubble() *bubble {
	return &bubble{base: time.Now(), wake: make(chan struct{}, 1)}
}

// trueNow is the simulation's true time, read in the bubble.
func (b *bubble) trueNow() int64 { return epoch0 + int64(time.Since(b.base)) }

// post hands fn to the loop, from a driver goroutine.
func (b *bubble) post(who string, seq uint64, fn func()) {
	b.mu.Lock()
	b.calls = append(b.calls, portCall{who: who, seq: seq, fn: fn})
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// postKeyed hands the loop a call ordered by what it asks (key) among
// the calls its caller made at one instant: for callers whose goroutines
// call concurrently, where a call number would follow the Go scheduler.
// Calls with equal keys ask the same thing, so their order does not
// matter.
func (b *bubble) postKeyed(who, key string, fn func()) {
	b.mu.Lock()
	b.calls = append(b.calls, portCall{who: who, key: key, fn: fn})
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// postLog hands the loop a driver's log line: the lines one caller logs at
// one instant, from goroutines Go ran in either order, go in by text.
func (b *bubble) postLog(who, line string, fn func()) {
	b.mu.Lock()
	b.calls = append(b.calls, portCall{who: who, seq: math.MaxUint64, key: line, fn: fn})
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// settle lets the drivers run until all are blocked and carries out
// their port calls in a fixed order, until no call is left.
func (s *sim) settle() {
	b := s.bubble
	for {
		synctest.Wait()
		b.mu.Lock()
		calls := b.calls
		b.calls = nil
		b.mu.Unlock()
		select {
		case <-b.wake:
		default:
		}
		if len(calls) == 0 {
			return
		}
		slices.SortFunc(calls, func(x, y portCall) int {
			return cmp.Or(cmp.Compare(x.who, y.who), cmp.Compare(x.seq, y.seq), cmp.Compare(x.key, y.key))
		})
		for _, c := range calls {
			c.fn()
		}
	}
}

// advance sleeps in the bubble toward true time target and sets s.now to
// where it stopped: target, or earlier if a driver made a port call.
func (s *sim) advance(target int64) {
	b := s.bubble
	if d := time.Duration(target - b.trueNow()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-b.wake:
		}
		t.Stop()
	}
	s.now = b.trueNow()
}

// bubbleStep runs before each event of a bubbled run: it settles the
// drivers and moves the bubble's clock to the next event; false if the
// clock stopped short of it (a driver called a port first).
func (s *sim) bubbleStep() bool {
	s.settle()
	if len(s.q) == 0 || s.q[0].at <= s.now {
		return true
	}
	s.advance(s.q[0].at)
	return false
}
