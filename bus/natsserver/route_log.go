package natsserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
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
// connect: connection refused"), lookupHost the host of a failed name
// lookup ("lookup for host \"n3\": lookup n3 on 127.0.0.11:53: no such
// host", a container that is gone).
var (
	dialAddr   = regexp.MustCompile(`dial tcp (\S+): `)
	lookupHost = regexp.MustCompile(`lookup for host "([^"]+)"`)
)

// peerOf is the peer a route dial error is about: the host of a failed
// lookup, else the address dialled, else the whole text.
func peerOf(errText string) string {
	if m := lookupHost.FindStringSubmatch(errText); m != nil {
		return m[1]
	}
	if m := dialAddr.FindStringSubmatch(errText); m != nil {
		return m[1]
	}
	return errText
}

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
	addr := peerOf(errText)
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
// The notice names the peer by address: a peer that was down by host
// name is matched by resolving that name with lookup (which may block:
// call created off the logging path).
func (r *routeLog) created(now time.Time, msg string, lookup func(host string) []string) *routeLine {
	m := routeCreated.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	addr := m[1]
	ip, _, _ := net.SplitHostPort(addr)
	r.mu.Lock()
	var names []string
	for key := range r.down {
		if host, _, err := net.SplitHostPort(key); key == addr || err == nil && host == ip {
			return r.back(now, key, addr)
		} else if err != nil && net.ParseIP(key) == nil {
			names = append(names, key)
		}
	}
	r.mu.Unlock()
	for _, name := range names {
		if lookup != nil && slices.Contains(lookup(name), ip) {
			r.mu.Lock()
			if r.down[name] != nil {
				return r.back(now, name, addr)
			}
			r.mu.Unlock()
		}
	}
	return nil
}

// back forgets the peer key and returns the line saying it is back. mu is
// held, and back unlocks it.
func (r *routeLog) back(now time.Time, key, addr string) *routeLine {
	defer r.mu.Unlock()
	d := r.down[key]
	delete(r.down, key)
	return &routeLine{slog.LevelInfo, "NATS route to a peer is back", []any{"peer", key, "addr", addr,
		"down_for", now.Sub(d.since).Round(time.Second), "failed_attempts", d.attempts}}
}

// lookupHost resolves host within a second (a peer known by name).
func lookupHostAddrs(host string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	addrs, _ := net.DefaultResolver.LookupHost(ctx, host)
	return addrs
}

// anyDown: some peer is down (a created route may be its return).
func (r *routeLog) anyDown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.down) > 0
}
