package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/raidq/raidq/stripe/quorum"
)

// gridParams are the test topic's parameters with offset grid g.
func gridParams(g uint64) quorum.Params {
	p := params()
	p.Grid = g
	return p
}

// TestWriterGridFirstOffsets: the first offsets of a gridded writer are
// the clock rounded up to the grid, then one cell further for a stripe
// started in the same cell; without a grid they are the clock, then +1
// (as before the grid).
func TestWriterGridFirstOffsets(t *testing.T) {
	now := int64(base) + 333 // base is on every grid; base+333 on none
	for _, g := range []uint64{0, 1, 1024, quorum.MaxGrid} {
		p := gridParams(g)
		w := NewWriter(DefaultWriterConfig(p))
		first, second := w.Start(now, sid(0, 1)).Offset, w.Start(now, sid(0, 2)).Offset
		step := max(g, 1)
		if first != p.GridUp(uint64(now)) || second != first+step {
			t.Fatalf("grid %d: offsets %d, %d from clock %d; want %d, %d", g, first, second, now, p.GridUp(uint64(now)), p.GridUp(uint64(now))+step)
		}
		if g <= 1 && first != uint64(now) {
			t.Fatalf("no grid: first offset %d, want the clock %d", first, now)
		}
	}
}

// TestWriterGridJitter: after a conflict the retry is pushed by a jitter
// of whole grid cells, below 1 ms; without a grid by ns below 1 ms,
// exactly as before the grid (max(now, last+1) + the jitter drawn).
func TestWriterGridJitter(t *testing.T) {
	now := int64(base) + 333
	for _, g := range []uint64{0, 1024} {
		p := gridParams(g)
		cfg := DefaultWriterConfig(p)
		spread := map[uint64]bool{}
		for seed := range uint64(50) {
			w := NewWriter(cfg)
			id := sid(0, 1)
			s0 := w.Start(now, id)
			var out WriterOutput
			for i := range p.N - p.W + 1 {
				out.add(w.Reply(now, newRand(seed), id, 0, i, StatusConflict, 0))
			}
			if len(out.Sends) != 1 {
				t.Fatalf("grid %d: one retry wanted, got %+v", g, out)
			}
			jitter := out.Sends[0].Offset - (s0.Offset + max(g, 1))
			spread[jitter] = true
			switch {
			case !p.OnGrid(out.Sends[0].Offset) || jitter%max(g, 1) != 0:
				t.Fatalf("grid %d: retry at %d after %d: jitter %d not in whole cells", g, out.Sends[0].Offset, s0.Offset, jitter)
			case jitter >= uint64(cfg.ConflictJitter):
				t.Fatalf("grid %d: jitter %d beyond %d", g, jitter, cfg.ConflictJitter)
			case g == 0 && int64(jitter) != newRand(seed).Int64N(cfg.ConflictJitter):
				t.Fatalf("no grid: jitter %d, not the draw of before the grid", jitter)
			}
		}
		if len(spread) < 40 {
			t.Fatalf("grid %d: 50 conflicts gave only %d distinct jitters", g, len(spread))
		}
	}
}

// TestWriterGridProperty drives writers through random replies (OK,
// CONFLICT, SEALED, NO_REPLY, BAD_REQUEST, and in a second round also
// CLOCK_AHEAD), with skewed node clocks, ticks and new stripes. Every
// offset handed out (first attempts, retries, jittered retries, rewrites,
// those after a CLOCK_AHEAD roll-back) is on the grid; and without
// CLOCK_AHEAD, the only cause of a roll-back, each is above the one
// before. (Random replies are not physical: an attempt beyond the nodes'
// future bound may still be answered OK after the roll-back, so the
// second round checks the grid alone.)
func TestWriterGridProperty(t *testing.T) {
	statuses := []Status{StatusOK, StatusOK, StatusOK, StatusOK, StatusConflict, StatusSealed, StatusNoReply, StatusBadRequest}
	for _, ahead := range []bool{false, true} {
		if ahead {
			statuses = append(statuses, StatusClockAhead, StatusClockAhead)
		}
		for _, g := range []uint64{0, 1024, quorum.MaxGrid} {
			for seed := range uint64(20) {
				driveWriter(t, gridParams(g), seed, statuses, !ahead)
			}
		}
	}
}

// driveWriter is one run of TestWriterGridProperty.
func driveWriter(t *testing.T, p quorum.Params, seed uint64, statuses []Status, increasing bool) {
	t.Helper()
	rnd := newRand(seed)
	w := NewWriter(DefaultWriterConfig(p))
	now := int64(base) + rnd.Int64N(1000)
	var open []Send
	var last uint64
	acks, retries := 0, 0
	take := func(out WriterOutput) {
		acks += len(out.Acks)
		for _, s := range out.Sends {
			switch {
			case !p.OnGrid(s.Offset):
				t.Fatalf("grid %d seed %d: offset %d off the grid", p.Grid, seed, s.Offset)
			case increasing && s.Offset <= last:
				t.Fatalf("grid %d seed %d: offset %d after %d", p.Grid, seed, s.Offset, last)
			}
			last = s.Offset
			open = append(open, s)
			if s.Attempt > 0 {
				retries++
			}
		}
	}
	for seq := uint64(1); seq < 2000; seq++ {
		now += rnd.Int64N(200_000)
		switch r := rnd.IntN(10); {
		case r == 0:
			take(WriterOutput{Sends: []Send{w.Start(now, sid(0, seq))}})
		case r == 1:
			take(w.Tick(now, rnd))
		case len(open) > 0:
			i := rnd.IntN(len(open))
			s := open[i]
			st := statuses[rnd.IntN(len(statuses))]
			clock := now + rnd.Int64N(600_000_000) - 300_000_000
			take(w.Reply(now, rnd, s.ID, s.Attempt, rnd.IntN(p.N), st, clock))
			if rnd.IntN(6) == 0 {
				open = append(open[:i], open[i+1:]...)
			}
		}
	}
	if acks == 0 || retries == 0 {
		t.Fatalf("grid %d seed %d: %d acks, %d retries: the run tried nothing", p.Grid, seed, acks, retries)
	}
}

// TestWriterBadRequestFails: an old producer that ignores the grid meets
// BAD_REQUEST from every node; that is a refusal like any other, so the
// send fails after MaxAttempts, naming it, rather than retrying for ever.
func TestWriterBadRequestFails(t *testing.T) {
	cfg := DefaultWriterConfig(params())
	fail := runToFailure(t, NewWriter(cfg), func(int) (Status, bool) { return StatusBadRequest, true })
	if fail == nil || !errors.Is(fail.Err, ErrNotEnoughNodes) || !strings.Contains(fail.Err.Error(), "position0=BAD_REQUEST") {
		t.Fatalf("fail %v, want ErrNotEnoughNodes naming BAD_REQUEST", fail)
	}
}
