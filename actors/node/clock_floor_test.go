package node

import (
	"context"
	"testing"
	"time"

	"github.com/raidq/raidq/bus"
)

// TestNodeClosingScan: a closing scan answers up to the node's clock minus
// A (never beyond what was asked), reports that offset as its Seal,
// writes no seal, and the node refuses writes below it from then on.
func TestNodeClosingScan(t *testing.T) {
	e := newEnv(t, envOpts{})
	accept := uint64(e.topic.Params.AcceptWindow)
	closedAt := midTime - accept // clock - A
	old := e.write(0, closedAt-10*ms, shardFor(t, 0, 1, closedAt-10*ms))
	expectStatus(t, "write older than now - A", old.Status, bus.StatusSealed, old.Detail)
	okOff := closedAt + 10*ms
	expectStatus(t, "write", e.write(0, okOff, shardFor(t, 0, 2, okOff)).Status, bus.StatusOK, "")

	r := e.scan(bus.ScanReq{Topic: testTopic, From: base, To: base + second, Close: true})
	expectStatus(t, "closing scan", r.Status, bus.StatusOK, r.Detail)
	if r.Seal != closedAt || r.Next != closedAt || len(r.Entries) != 0 {
		t.Fatalf("closing scan: closed %d next %d, %d entries; want closed = next = clock-A = %d, no entries",
			r.Seal-base, r.Next-base, len(r.Entries), closedAt-base)
	}
	if seal, err := e.store.Seal(testTopic, 0, base); err != nil || seal != 0 {
		t.Fatalf("a closing scan wrote seal %d (%v)", seal, err)
	}
	// Asked for less than it could close, the node closes only that.
	r = e.scan(bus.ScanReq{Topic: testTopic, From: base, To: base + 100*ms, Close: true})
	if r.Seal != base+100*ms || r.Next != base+100*ms {
		t.Fatalf("short closing scan: closed %d next %d, want %d", r.Seal-base, r.Next-base, 100*ms)
	}
	// Later, the slot written above is inside what the node closes.
	e.clock.Advance(time.Duration(accept))
	r = e.scan(bus.ScanReq{Topic: testTopic, From: base, To: base + second, Close: true})
	if r.Seal != midTime || len(r.Entries) != 1 || r.Entries[0].Offset != okOff {
		t.Fatalf("closing scan later: closed %d, entries %v; want %d and the slot at %d", r.Seal-base, r.Entries, midTime-base, okOff-base)
	}
}

// TestNodeClockFloorSurvivesRestart: a node restarted on the same store
// with its clock stepped back (by less than F, so its clock alone would
// take the write) keeps refusing (SEALED) the offsets it closed before,
// and closes no less than before.
func TestNodeClockFloorSurvivesRestart(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.scan(bus.ScanReq{Topic: testTopic, From: base, To: base + second, Close: true})
	closed := r.Seal
	if floor, err := e.store.ClockFloor(); err != nil || floor < midTime {
		t.Fatalf("durable floor %d (%v), want at least the clock it closed by (%d)", floor, err, midTime)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.node.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(midTime - 200*ms)
	e.start()
	off := closed - 5*ms // the restarted node's clock alone would take it
	w := e.write(0, off, shardFor(t, 0, 3, off))
	expectStatus(t, "write below what the node closed before its restart", w.Status, bus.StatusSealed, w.Detail)
	r = e.scan(bus.ScanReq{Topic: testTopic, From: base, To: base + second, Close: true})
	if r.Seal < closed {
		t.Fatalf("after the restart the node closed %d, less than %d before", r.Seal-base, closed-base)
	}
}
