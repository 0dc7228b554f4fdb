package actorsys

import (
	"context"
	"log/slog"
)

// minLevel is a slog.Handler that drops records below min before they reach the wrapped handler.
type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (f minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.h.Enabled(ctx, l)
}
func (f minLevel) Handle(ctx context.Context, r slog.Record) error { return f.h.Handle(ctx, r) }
func (f minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{f.h.WithAttrs(a), f.min}
}
func (f minLevel) WithGroup(g string) slog.Handler { return minLevel{f.h.WithGroup(g), f.min} }
