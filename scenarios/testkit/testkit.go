// Package testkit is the test kit of raidq's tests: a logger that writes to
// the test's log, one wait-for-event helper and one fake clock. It imports
// nothing but the standard library, so any package's tests can use it
// (actors/node's included) without an import cycle.
//
// Tests wait on the event they need (every member record visible, a
// topic in every catalog, a counter reaching its value), never on time:
// WaitFor polls the condition with a short backoff, and its deadline is a
// guard against a hang, not a timing assertion.
package testkit

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Logger returns a logger that writes each record at level and above with
// t.Log, so tests are quiet unless they fail or run with -v. Records logged
// after the test ended are dropped.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	h := &handler{t: t, mu: &sync.Mutex{}, buf: &bytes.Buffer{}}
	h.inner = slog.NewTextHandler(h.buf, &slog.HandlerOptions{Level: level})
	return slog.New(h)
}

type handler struct {
	t     testing.TB
	mu    *sync.Mutex
	buf   *bytes.Buffer
	inner slog.Handler
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	line := bytes.TrimRight(h.buf.Bytes(), "\n")
	defer func() { _ = recover() }() // t.Log after the test ended panics; drop the line
	h.t.Log(string(line))
	return nil
}

func (h *handler) WithAttrs(a []slog.Attr) slog.Handler {
	return &handler{t: h.t, mu: h.mu, buf: h.buf, inner: h.inner.WithAttrs(a)}
}

func (h *handler) WithGroup(g string) slog.Handler {
	return &handler{t: h.t, mu: h.mu, buf: h.buf, inner: h.inner.WithGroup(g)}
}

// WaitLimit is how long WaitFor polls before it fails the test. It only
// guards against a hang (a test that would otherwise block until go test's
// own timeout, with no word on what it waited for): it is generous, so
// that a loaded machine never reaches it, and no test may lean on it.
const WaitLimit = 2 * time.Minute

// Poll intervals of WaitFor: the first poll again after firstPoll, each
// later one after twice the last, up to maxPoll.
const (
	firstPoll = time.Millisecond
	maxPoll   = 50 * time.Millisecond
)

// WaitFor polls cond until it holds and returns how long that took. It
// fails the test (t.Fatalf, so call it from the test's goroutine) naming
// what it waited for if cond still does not hold after WaitLimit. cond is
// called from this goroutine only, first at once, then with a backoff of
// 1 ms doubling to 50 ms.
func WaitFor(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	return waitFor(t, what, WaitLimit, cond)
}

func waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for wait := firstPoll; !cond(); wait = min(2*wait, maxPoll) {
		if time.Since(start) > limit {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(wait)
	}
	return time.Since(start)
}

// Clock is a fake clock for the code under test, in unix nanoseconds (the
// unit of raidq's Now options): it stands still until the test sets or
// advances it. Safe for concurrent use.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock reading at (unix ns).
func NewClock(at int64) *Clock {
	c := &Clock{}
	c.ns.Store(at)
	return c
}

// Now reads the clock (unix ns); pass c.Now as a func() int64 option.
func (c *Clock) Now() int64 { return c.ns.Load() }

// Time reads the clock as a time.Time; pass c.Time as a func() time.Time
// option.
func (c *Clock) Time() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to at (unix ns), backwards too.
func (c *Clock) Set(at int64) { c.ns.Store(at) }

// Advance moves the clock on by d (back, if d is negative).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
