package natsserver

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// routeSummaryEvery is how often a route that stays down is reported
// again, with the count of failed attempts since the last line.
const routeSummaryEvery = time.Minute

// routeConnErrFormat is the format nats-server logs a failed route dial
// with, at Error, once per attempt per pooled route connection (about one
// a second each): thousands of lines for a peer down a few minutes.
const routeConnErrFormat = "Error trying to connect to route (attempt %v): %v"

// routeLine is one line routeLog decides to write.
type routeLine struct {
	level slog.Level
	msg   string
	attrs []any
}

// routeLog folds the repeated route dial errors for a peer that is down
// into one line when it goes, a periodic line with the count while it
// stays down, and one line when its route is created again. It is pure
// but for its lock: the time comes in, the lines go out.
type routeLog struct {
	mu   sync.Mutex
	down map[string]*routeDown // by the address dialled
}

// routeDown is one peer address whose routes fail to connect.
type routeDown struct {
	since, reported time.Time
	attempts        int // since since
	sinceReport     int // since reported
	lastErr         string
}

// dialAddr finds the address in a dial error ("dial tcp 10.0.0.2:6222:
// connect: connection refused").
var dialAddr = regexp.MustCompile(`dial tcp (\S+): `)

// routeCreated finds the peer of "10.0.0.2:6222 - rid:5 - Route connection
// created" (the client prefix nats-server puts before the notice).
var routeCreated = regexp.MustCompile(`^(\S+) - rid:\d+ - Route connection created`)

// failed takes one route dial error logged with routeConnErrFormat and
// returns the line to write, if any (handled: the adapter writes nothing
// else for it).
func (r *routeLog) failed(now time.Time, v []any) (line *routeLine, handled bool) {
	if len(v) != 2 {
		return nil, false
	}
	errText := fmt.Sprint(v[1])
	addr := errText
	if m := dialAddr.FindStringSubmatch(errText); m != nil {
		addr = m[1]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down == nil {
		r.down = make(map[string]*routeDown)
	}
	d := r.down[addr]
	if d == nil {
		if len(r.down) >= maxRoutesDown {
			return nil, false // past the bound: plain lines, as nats-server writes them
		}
		r.down[addr] = &routeDown{since: now, reported: now, attempts: 1, lastErr: errText}
		return &routeLine{slog.LevelWarn, "NATS route to a peer is down; retrying, failures summarised every " + routeSummaryEvery.String(),
			[]any{"peer", addr, "err", errText}}, true
	}
	d.attempts++
	d.sinceReport++
	d.lastErr = errText
	if now.Sub(d.reported) < routeSummaryEvery {
		return nil, true
	}
	line = &routeLine{slog.LevelWarn, "NATS route to a peer still down", []any{"peer", addr, "down_for", now.Sub(d.since).Round(time.Second),
		"failed_attempts", d.sinceReport, "in", now.Sub(d.reported).Round(time.Second), "err", errText}}
	d.reported, d.sinceReport = now, 0
	return line, true
}

// maxRoutesDown bounds the peers tracked at once.
const maxRoutesDown = 256

// created takes a notice; for a route created to a peer that was down it
// returns the line saying it is back (the notice itself is still logged).
func (r *routeLog) created(now time.Time, msg string) *routeLine {
	if !strings.Contains(msg, "Route connection created") {
		return nil
	}
	m := routeCreated.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.down[m[1]]
	if d == nil {
		return nil
	}
	delete(r.down, m[1])
	return &routeLine{slog.LevelInfo, "NATS route to a peer is back", []any{"peer", m[1], "down_for", now.Sub(d.since).Round(time.Second),
		"failed_attempts", d.attempts}}
}
