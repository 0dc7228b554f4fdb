package node

import (
	"testing"
	"time"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestNodeAlterLateUsesSmallerWindow: a node that first sees a raise of
// the accept window with its clock already past the switch offset uses
// the smaller window for the ranges just past it (so it refuses what it
// may have closed under the old one), and the new window beyond them.
func TestNodeAlterLateUsesSmallerWindow(t *testing.T) {
	e := newEnv(t, envOpts{})
	old := e.topic.Params.AcceptWindow
	p := e.topic.Params
	p.AcceptWindow, p.ReadDelay = 400*time.Millisecond, 400*time.Millisecond
	altered := *e.topic
	altered.Params = p
	altered.Accept = quorum.AcceptPlan{Prev: int64(old), Next: int64(p.AcceptWindow), From: base}
	mustPut(t, e.cat, &altered)

	// Range base+1s is in [From, late boundary): the smaller window, 250ms.
	e.clock.Set(base + second + 300*ms)
	off := base + second + 20*ms // older than clock - 250ms, within clock - 400ms
	w := e.write(0, off, shardFor(t, 0, 1, off))
	expectStatus(t, "write past the switch on a late node, older than the smaller window", w.Status, bus.StatusSealed, w.Detail)

	// Range base+3s is beyond the late boundary (base + 2s): the new window.
	e.clock.Set(base + 3*second + 500*ms)
	off = base + 3*second + 200*ms
	w = e.write(0, off, shardFor(t, 0, 2, off))
	expectStatus(t, "write within the new window beyond the late boundary", w.Status, bus.StatusOK, w.Detail)
}
