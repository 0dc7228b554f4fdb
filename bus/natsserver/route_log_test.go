package natsserver

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRouteLogFoldsDialErrors: a peer down for five minutes, dialled by
// four pooled route connections once a second each, is one line when it
// goes, one a minute while it stays down and one when it is back, instead
// of 1200 Error lines; another peer's errors are its own.
func TestRouteLogFoldsDialErrors(t *testing.T) {
	var buf bytes.Buffer
	a := newSlogAdapter(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	dial := func(addr string) error { return errors.New("dial tcp " + addr + ": connect: connection refused") }
	for s := range 300 {
		now = time.Unix(1000+int64(s), 0)
		for attempt := range 4 {
			a.Errorf(routeConnErrFormat, s+attempt, dial("127.0.0.1:6222"))
		}
	}
	a.Errorf(routeConnErrFormat, 1, dial("[::1]:6223"))
	// Noticef hands these to a goroutine (a host name may need resolving):
	// call what it calls, in order.
	a.logLine(a.routes.created(now, "127.0.0.1:6222 - rid:7 - Route connection created", nil))
	a.logLine(a.routes.created(now, "127.0.0.1:6229 - rid:8 - Route connection created", nil)) // never down: no "back" line
	out := buf.String()
	count := func(s string) int { return strings.Count(out, s) }
	if got := count("Error trying to connect"); got != 0 {
		t.Errorf("%d raw dial errors logged", got)
	}
	if count(`msg="NATS route to a peer is down`) != 2 || count(`peer=[::1]:6223`) != 1 {
		t.Errorf("want one 'down' line per peer:\n%s", out)
	}
	if got := count("still down"); got != 4 { // at 60, 120, 180, 240 s
		t.Errorf("%d summaries over 300 s, want 4:\n%s", got, out)
	}
	if !strings.Contains(out, "failed_attempts=240") || count("is back") != 1 || !strings.Contains(out, "failed_attempts=1200") {
		t.Errorf("counts:\n%s", out)
	}
	if a.lastError() != "" {
		t.Errorf("folded dial errors count as the server's last error: %q", a.lastError())
	}
}

// TestRouteLogByHostName: in compose a dead peer's name stops resolving;
// its errors are folded by the host name, whatever the resolver says each
// time, and its return (a route from its address) is matched by
// resolving the name.
func TestRouteLogByHostName(t *testing.T) {
	var buf bytes.Buffer
	a := newSlogAdapter(slog.New(slog.NewTextHandler(&buf, nil)))
	for _, e := range []string{`lookup for host "n3": lookup n3 on 127.0.0.11:53: no such host`,
		`lookup for host "n3": lookup n3 on 127.0.0.11:53: read udp 127.0.0.1:40000->127.0.0.11:53: i/o timeout`} {
		a.Errorf(routeConnErrFormat, 1, errors.New(e))
	}
	if got := strings.Count(buf.String(), "is down"); got != 1 {
		t.Fatalf("%d 'down' lines for one peer:\n%s", got, buf.String())
	}
	lookup := func(host string) []string {
		if host == "n3" {
			return []string{"172.29.42.13"}
		}
		return nil
	}
	if line := a.routes.created(time.Now(), "10.9.9.9:6222 - rid:3 - Route connection created", lookup); line != nil {
		t.Errorf("another peer's route taken for n3's return: %+v", line)
	}
	line := a.routes.created(time.Now(), "172.29.42.13:6222 - rid:4 - Route connection created", lookup)
	if line == nil || line.msg != "NATS route to a peer is back" || a.routes.anyDown() {
		t.Errorf("n3's return: %+v, still down: %v", line, a.routes.anyDown())
	}
}
