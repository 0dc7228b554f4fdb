// Package testlog routes slog (and so protoactor and nats-server logs) to
// testing.T, so tests are quiet unless they fail or run with -v.
package testlog

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
)

// New returns a logger that writes each record with t.Log at level and above.
func New(t testing.TB, level slog.Level) *slog.Logger {
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
