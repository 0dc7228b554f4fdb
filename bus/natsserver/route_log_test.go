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
	a.Noticef("%s - rid:%d - Route connection created", "127.0.0.1:6222", 7)
	a.Noticef("%s - rid:%d - Route connection created", "127.0.0.1:6229", 8) // never down: no "back" line
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
