package core

import (
	"testing"

	"github.com/raidq/raidq/stripe/invariants/invariantstest"
)

// The writer's assertions (writer.go) fire where the acks they rest on
// are broken; each test breaks the writer's state as a bug would.

func newInvariantWriter(t *testing.T) (*Writer, Send, int64) {
	t.Helper()
	w := NewWriter(DefaultWriterConfig(params()))
	now := int64(base) + 100*ms
	return w, w.Start(now, sid(0, 1)), now
}

// TestWriterInvariantAcksAtMostN: an attempt counts at most one answer
// per ensemble position.
func TestWriterInvariantAcksAtMostN(t *testing.T) {
	w, s, now := newInvariantWriter(t)
	w.stripes[s.ID].attempts[0].ok = params().N // n oks counted before any reply
	invariantstest.Fires(t, "ok + 0 other answers from 6 positions", func() {
		w.Reply(now, newRand(1), s.ID, 0, 0, StatusOK, 0)
	})
}

// TestWriterInvariantAckCounted: the oks an ack rests on are the replies
// recorded at the attempt's offset.
func TestWriterInvariantAckCounted(t *testing.T) {
	w, s, now := newInvariantWriter(t)
	w.stripes[s.ID].attempts[0].ok = params().W - 1 // counted without replies
	invariantstest.Fires(t, "oks counted, 1 recorded", func() {
		w.Reply(now, newRand(1), s.ID, 0, 0, StatusOK, 0)
	})
}

// TestWriterInvariantAckCommittedHi: an acked offset is at or below the
// highest offset Reply saw reach W.
func TestWriterInvariantAckCommittedHi(t *testing.T) {
	w, s, now := newInvariantWriter(t)
	a := w.stripes[s.ID].attempts[0]
	for i := range params().W { // W oks recorded behind Reply's back
		a.replies[i] = StatusOK
	}
	a.ok = params().W
	invariantstest.Fires(t, "above the highest committed offset 0", func() {
		w.Tick(now+w.cfg.AttemptTimeout, newRand(1))
	})
}

// TestWriterInvariantAckedAtAttempt: a committed stripe's acked offset is
// that of an attempt which reached W.
func TestWriterInvariantAckedAtAttempt(t *testing.T) {
	w, s, now := newInvariantWriter(t)
	var out WriterOutput
	for i := range params().W {
		out = w.Reply(now, newRand(1), s.ID, 0, i, StatusOK, 0)
	}
	if len(out.Acks) != 1 || out.Acks[0].Offset != s.Offset {
		t.Fatalf("W oks gave %+v, want the ack at %d", out, s.Offset)
	}
	w.stripes[s.ID].acked++ // still waiting for the last replies; the ack moved
	invariantstest.Fires(t, "where none of its 1 attempts reached W", func() {
		w.Reply(now, newRand(1), s.ID, 0, params().W, StatusOK, 0)
	})
}
