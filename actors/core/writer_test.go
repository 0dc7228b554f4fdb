package core

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestWriterClockSkew: nodes refuse a producer whose clock is far off
// (CLOCK_AHEAD when ahead, SEALED when behind) and report their clocks;
// the retry uses the corrected offset and commits.
func TestWriterClockSkew(t *testing.T) {
	cases := []struct {
		name  string
		node  int64 // node clock, in ms past base (the test owners cover one second)
		skew  int64 // producer clock minus the nodes' clock
		first Status
	}{
		{name: "ahead 400ms", node: 50, skew: 400 * ms, first: StatusClockAhead},
		{name: "ahead 900ms", node: 50, skew: 900 * ms, first: StatusClockAhead},
		{name: "behind 400ms", node: 500, skew: -400 * ms, first: StatusSealed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(params().N)
			pr := newProducer(0)
			node := int64(base) + tc.node*ms
			now := node + tc.skew
			s := pr.start(t, now, 1)
			var queue []flight
			for i := range c.owners {
				st := c.write(node, i, pr.shards[s.ID])
				if st != tc.first {
					t.Fatalf("node %d answered %v, want %v", i, st, tc.first)
				}
				for _, r := range pr.take(t, pr.w.Reply(now, newRand(1), s.ID, 0, i, st, node)) {
					queue = append(queue, flight{pr, r})
				}
			}
			if got := pr.w.Skew(); got != -tc.skew {
				t.Fatalf("skew estimate %d, want %d", got, -tc.skew)
			}
			if len(queue) != 1 || queue[0].s.Attempt != 1 || queue[0].s.ID != s.ID {
				t.Fatalf("want one retry of the same stripe, got %+v", queue)
			}
			if off := int64(queue[0].s.Offset); off-node < 0 || off-node > ms {
				t.Fatalf("retry offset %d is %dns from the node clock %d", off, off-node, node)
			}
			settle(t, c, node-ms, queue) // settle advances its clock by 1ms per send
			if ack, ok := pr.acks[s.ID]; !ok || ack != queue[0].s.Offset {
				t.Fatalf("acked=%v at %d, want the corrected offset %d", ok, ack, queue[0].s.Offset)
			}
		})
	}
}

// TestWriterTimeoutRetries: an attempt with no replies is abandoned at
// AttemptTimeout and the same stripe id is retried at a fresh offset; the
// late replies of the abandoned attempt change nothing once it is done.
func TestWriterTimeoutRetries(t *testing.T) {
	cfg := DefaultWriterConfig(params())
	w := NewWriter(cfg)
	rnd := newRand(1)
	now := int64(base)
	id := sid(0, 1)
	s0 := w.Start(now, id)
	if out := w.Tick(now+cfg.AttemptTimeout-1, rnd); !out.Empty() {
		t.Fatalf("tick before the deadline: %v", out)
	}
	later := now + cfg.AttemptTimeout
	out := w.Tick(later, rnd)
	if outLen(out) != 1 {
		t.Fatalf("tick at the deadline: %v", out)
	}
	if len(out.Sends) != 1 {
		t.Fatalf("tick at the deadline, no retry: %v", out)
	}
	s1 := out.Sends[0]
	if s1.ID != id || s1.Attempt != 1 || s1.Offset <= s0.Offset || int64(s1.Offset) < later {
		t.Fatalf("retry %+v after first attempt at %d", out, s0.Offset)
	}
	var effects WriterOutput
	for i := range params().N {
		effects.add(w.Reply(later+ms, rnd, id, 1, i, StatusOK, 0))
	}
	if !hasAck(effects, id, s1.Offset) || !hasDone(effects, id) || w.InFlight() != 0 {
		t.Fatalf("effects %v, %d in flight", effects, w.InFlight())
	}
	for i := range params().N {
		if out := w.Reply(later+2*ms, rnd, id, 0, i, StatusOK, 0); !out.Empty() {
			t.Fatalf("late reply of a finished stripe: %v", out)
		}
	}
}

// TestWriterFailure: after MaxAttempts the send fails with an error that
// wraps the right sentinel and names what every node answered last.
func TestWriterFailure(t *testing.T) {
	cases := []struct {
		name   string
		answer func(node int) (Status, bool) // false = no reply at all
		nodes  []string                      // WriterConfig.Nodes
		want   error
		names  []string
	}{
		{name: "three nodes NO_REPLY", answer: func(n int) (Status, bool) {
			if n < 3 {
				return StatusOK, true
			}
			return StatusNoReply, true
		}, want: ErrNotEnoughNodes, names: []string{"position0=OK", "position2=OK", "position3=NO_REPLY", "position5=NO_REPLY"}},
		{name: "three nodes silent", answer: func(n int) (Status, bool) { return StatusOK, n < 3 },
			want: ErrTimeout, names: []string{"position1=OK", "position4=pending"}},
		{name: "always ahead, no clocks", answer: func(int) (Status, bool) { return StatusClockAhead, true },
			want: ErrClockSkew, names: []string{"position0=CLOCK_AHEAD", "position2=CLOCK_AHEAD", "position3=pending"}},
		{name: "mixed refusals", answer: func(n int) (Status, bool) { return []Status{StatusSealed, StatusBusy, StatusConflict}[n%3], true },
			want: ErrNotEnoughNodes, nodes: []string{"a", "b", "c", "d", "e", "f"}, names: []string{"a=SEALED", "b=BUSY", "c=CONFLICT"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultWriterConfig(params())
			cfg.Nodes, cfg.RetrySpan = tc.nodes, 0 // MaxAttempts alone (TestWriterRetrySpan)
			w := NewWriter(cfg)
			fail := runToFailure(t, w, tc.answer)
			if fail == nil {
				t.Fatal("never failed")
			}
			msg := fail.Err.Error()
			if attempts := fmt.Sprintf("%d attempts", cfg.MaxAttempts); !errors.Is(fail.Err, tc.want) || !strings.Contains(msg, attempts) {
				t.Fatalf("error %q, want %v after %s", msg, tc.want, attempts)
			}
			for _, n := range tc.names {
				if !strings.Contains(msg, n) {
					t.Fatalf("error %q does not name %s", msg, n)
				}
			}
			if w.InFlight() != 0 {
				t.Fatalf("%d stripes left in flight", w.InFlight())
			}
		})
	}
}

// runToFailure answers every attempt of one stripe as answer says (letting
// attempts with missing replies time out) until the writer gives up.
func runToFailure(t *testing.T, w *Writer, answer func(node int) (Status, bool)) *Fail {
	t.Helper()
	rnd := newRand(2)
	now := int64(base)
	id := sid(0, 1)
	sends := []Send{w.Start(now, id)}
	var fail *Fail
	for step := 0; len(sends) > 0 && step < 100; step++ {
		s := sends[0]
		sends = sends[1:]
		var out WriterOutput
		for i := range params().N {
			if st, ok := answer(i); ok {
				out.add(w.Reply(now, rnd, id, s.Attempt, i, st, 0))
			}
		}
		now += w.cfg.AttemptTimeout
		if out.Empty() { // the attempt still waits: let it time out
			out = w.Tick(now, rnd)
		}
		for _, e := range out.Acks {
			t.Fatalf("acked: %+v", e)
		}
		for _, e := range out.Fails {
			fail = &e
		}
		sends = append(sends, out.Sends...)
	}
	return fail
}

// TestWriterRewrite: a committed stripe whose attempt met a CONFLICT is
// written once more at a fresh offset (§3.7), whatever the reply order;
// a clean commit is not; the rewrite never rewrites itself; and the writer
// forgets the stripe only once nothing can change any more.
func TestWriterRewrite(t *testing.T) {
	const (
		o = StatusOK
		x = StatusConflict
		s = StatusSealed
	)
	cases := []struct {
		name    string
		first   []Status // replies of attempt 0, in arrival order by node
		rewrite []Status // replies of the rewrite, if one is expected
		tick    bool     // leave replies missing and let Tick end the wait
	}{
		{name: "clean", first: []Status{o, o, o, o, o, o}},
		{name: "conflicts last", first: []Status{o, o, o, o, x, x}, rewrite: []Status{o, o, o, o, o, o}},
		{name: "conflict first", first: []Status{x, o, o, o, o, o}, rewrite: []Status{o, o, o, o, o, o}},
		{name: "rewrite conflicts too", first: []Status{o, o, o, o, x, x}, rewrite: []Status{x, o, o, o, o, x}},
		{name: "rewrite refused", first: []Status{o, x, o, o, o, s}, rewrite: []Status{s, s, s, o, o, o}},
		{name: "sealed by a live node also rewrites", first: []Status{o, o, o, o, s, s}, rewrite: []Status{o, o, o, o, o, o}},
		{name: "dead nodes do not rewrite", first: []Status{o, o, o, o, StatusNoReply, StatusNoReply}},
		{name: "missing replies", first: []Status{o, o, o, o}, tick: true},
		{name: "missing rewrite replies", first: []Status{o, o, o, o, x, o}, rewrite: []Status{o, o}, tick: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultWriterConfig(params())
			w := NewWriter(cfg)
			rnd := newRand(4)
			now := int64(base)
			id := sid(0, 1)
			s0 := w.Start(now, id)
			out := replyAll(t, w, now, id, 0, tc.first, true)
			if !hasAck(out, id, s0.Offset) {
				t.Fatalf("no ack at %d: %v", s0.Offset, out)
			}
			rw := sends(out)
			if (tc.rewrite != nil) != (len(rw) == 1) || len(rw) > 1 {
				t.Fatalf("rewrites %v, want one: %v", rw, tc.rewrite != nil)
			}
			if rw != nil {
				if rw[0].ID != id || rw[0].Offset <= s0.Offset {
					t.Fatalf("rewrite %+v", rw[0])
				}
				out = replyAll(t, w, now+ms, id, rw[0].Attempt, tc.rewrite, false)
				if len(sends(out)) != 0 || hasAck(out, id, rw[0].Offset) {
					t.Fatalf("the rewrite produced %v", out)
				}
			}
			if tc.tick {
				if hasDone(out, id) {
					t.Fatalf("done with replies missing: %v", out)
				}
				// A committed stripe keeps listening for late refusals for
				// CommittedWait, a rewrite attempt only for AttemptTimeout.
				wait := cfg.AttemptTimeout
				if tc.rewrite == nil {
					if out := w.Tick(now+cfg.AttemptTimeout, rnd); hasDone(out, id) {
						t.Fatalf("committed stripe forgotten before CommittedWait: %v", out)
					}
					wait = cfg.CommittedWait
				}
				out = w.Tick(now+wait, rnd)
				if len(sends(out)) != 0 {
					t.Fatalf("tick of a committed stripe sent %v", out)
				}
			}
			if !hasDone(out, id) || w.InFlight() != 0 {
				t.Fatalf("not done: %v, %d in flight", out, w.InFlight())
			}
		})
	}
}

// replyAll hands the writer one reply per node, in node order; with
// holdOn it checks the writer does not let go of the stripe before the last.
func replyAll(t *testing.T, w *Writer, now int64, id stripe.ID, att int, replies []Status, holdOn bool) WriterOutput {
	t.Helper()
	var out WriterOutput
	for i, st := range replies {
		if holdOn && hasDone(out, id) {
			t.Fatalf("done before reply %d of %v", i, replies)
		}
		out.add(w.Reply(now, newRand(4), id, att, i, st, 0))
	}
	return out
}

func hasAck(out WriterOutput, id stripe.ID, off uint64) bool {
	for _, a := range out.Acks {
		if a.ID == id && a.Offset == off {
			return true
		}
	}
	return false
}

func hasDone(out WriterOutput, id stripe.ID) bool {
	for _, d := range out.Done {
		if d.ID == id {
			return true
		}
	}
	return false
}

func sends(out WriterOutput) []Send { return out.Sends }

// outLen counts every entry of every list of out.
func outLen(out WriterOutput) int {
	return len(out.Acks) + len(out.Fails) + len(out.Sends) + len(out.Done)
}

// TestWriterSkewPipelined: five stripes in flight from a producer 400ms
// ahead all die of CLOCK_AHEAD; each retry follows the corrected clock,
// rather than the refused offsets of the others, and commits at once.
func TestWriterSkewPipelined(t *testing.T) {
	c := newCluster(params().N)
	pr := newProducer(0)
	node := int64(base) + 50*ms
	now := node + 400*ms
	var round []flight
	for seq := range uint64(5) {
		round = append(round, flight{pr, pr.start(t, now, seq+1)})
	}
	rnd := newRand(1)
	for attempt := 0; len(round) > 0; attempt++ {
		if attempt > 1 {
			t.Fatalf("round %d still sends %+v", attempt, round)
		}
		status := make([][]Status, len(round))
		for k, f := range round { // every node takes every shard, then replies interleave
			shards := stripe.Reshard(pr.shards[f.s.ID], f.s.Offset)
			for i := range c.owners {
				status[k] = append(status[k], c.write(node, i, shards))
			}
		}
		node, now = node+ms, now+ms
		var next []flight
		for i := range c.owners {
			for k, f := range round {
				for _, s := range pr.take(t, pr.w.Reply(now, rnd, f.s.ID, f.s.Attempt, i, status[k][i], node)) {
					next = append(next, flight{pr, s})
				}
			}
		}
		round = next
	}
	if len(pr.acks) != 5 || len(pr.fails) != 0 {
		t.Fatalf("%d acks, fails %v", len(pr.acks), pr.fails)
	}
	var last uint64
	for seq := range uint64(5) {
		off := pr.acks[sid(0, seq+1)]
		if off <= last || int64(off) > node+ms {
			t.Fatalf("stripe %d acked at %d (previous %d, node clock %d)", seq+1, off, last, node)
		}
		last = off
	}
}

// TestWriterJitterWhenPinned: two producers whose offsets run ahead of
// their corrected clocks (pinned to last+1) collide on one offset; after
// the conflict their retries must be pushed apart by the jitter, not both
// land on last+1 again.
func TestWriterJitterWhenPinned(t *testing.T) {
	node := int64(base) + 50*ms
	now := node + 200*ms // both clocks 200ms ahead: within F, so nodes accept
	ws := []*Writer{NewWriter(DefaultWriterConfig(params())), NewWriter(DefaultWriterConfig(params()))}
	rnd := newRand(9)
	var retries []Send
	for p, w := range ws {
		id := sid(p, 1)
		s := w.Start(now, id)
		// one node refuses with its clock: the writer learns it runs 200ms ahead
		w.Reply(now, rnd, id, 0, 5, StatusClockAhead, node)
		// the other producer got there first on three nodes
		var out WriterOutput
		for i := range 5 {
			st := StatusOK
			if (i < 3) == (p == 1) {
				st = StatusConflict
			}
			out.add(w.Reply(now, rnd, id, s.Attempt, i, st, 0))
		}
		if ss := sends(out); len(ss) != 1 {
			t.Fatalf("producer %d: %v", p, out)
		} else {
			retries = append(retries, ss[0])
		}
	}
	if retries[0].Offset == retries[1].Offset {
		t.Fatalf("both producers retry at %d", retries[0].Offset)
	}
}

// TestWriterDeliveryTimeout: with a delivery timeout a stripe that cannot
// commit is retried past MaxAttempts, with a growing backoff, until the
// timeout, and then fails naming it; one that can commit again in time
// (three nodes back) is acked.
func TestWriterDeliveryTimeout(t *testing.T) {
	for _, heal := range []bool{false, true} {
		cfg := DefaultWriterConfig(params())
		cfg.DeliveryTimeout = int64(4 * time.Second)
		w := NewWriter(cfg)
		rnd := newRand(3)
		start := int64(base)
		id := sid(0, 1)
		pending := []Send{w.Start(start, id)}
		var fail *Fail
		var ack *Ack
		attempts := 1
		for now := start; fail == nil && ack == nil && now < start+int64(10*time.Second); now += int64(10 * time.Millisecond) {
			var out WriterOutput
			for _, s := range pending {
				for i := range params().N {
					st := StatusNoReply
					if i < 3 || (heal && now-start > int64(3*time.Second)) {
						st = StatusOK
					}
					out.add(w.Reply(now, rnd, id, s.Attempt, i, st, 0))
				}
			}
			pending = nil
			out.add(w.Tick(now, rnd))
			for _, e := range out.Acks {
				ack = &e
			}
			for _, e := range out.Fails {
				fail = &e
				if elapsed := time.Duration(now - start); elapsed < 4*time.Second {
					t.Fatalf("failed after %s, before the 4s delivery timeout", elapsed)
				}
			}
			for _, e := range out.Sends {
				pending = append(pending, e)
				attempts++
			}
		}
		if heal {
			if ack == nil {
				t.Fatalf("heal: not acked (fail %v)", fail)
			}
			continue
		}
		if fail == nil || !errors.Is(fail.Err, ErrNotEnoughNodes) || !strings.Contains(fail.Err.Error(), "delivery timeout 4s") {
			t.Fatalf("fail %v, want ErrNotEnoughNodes naming the delivery timeout", fail)
		}
		// 16 quick attempts (2s), then backoffs of 125ms, 250ms, 500ms, 1s, 1s...
		if attempts <= cfg.MaxAttempts || attempts > cfg.MaxAttempts+5 {
			t.Fatalf("%d attempts in 4s, want a few more than %d (backed off)", attempts, cfg.MaxAttempts)
		}
		if w.InFlight() != 0 {
			t.Fatalf("%d stripes left in flight", w.InFlight())
		}
	}
}

// TestWriterRetrySpan: on the low-latency profile (attempts of 10ms) a
// stripe no node takes is still retried, with a growing backoff, until
// RetrySpan (2s) after its first attempt, not failed after 16 attempts
// (160ms); and a node coming back within the span gets it acked.
func TestWriterRetrySpan(t *testing.T) {
	p := quorum.LowLatency()
	for _, recover := range []bool{false, true} {
		w := NewWriter(DefaultWriterConfig(p))
		rnd := newRand(3)
		start := int64(base)
		id := sid(0, 1)
		sends := []Send{w.Start(start, id)}
		var failedAt, ackedAt int64
		for now := start; now < start+3*DefaultRetrySpan && failedAt == 0 && ackedAt == 0; now += int64(time.Millisecond) {
			var out WriterOutput
			for _, s := range sends {
				for i := range p.N {
					st := StatusNoReply
					if recover && now-start > int64(time.Second) {
						st = StatusOK
					}
					out.add(w.Reply(now, rnd, id, s.Attempt, i, st, now))
				}
			}
			out.add(w.Tick(now, rnd))
			sends = out.Sends
			if len(out.Fails) > 0 {
				failedAt = now
			}
			if len(out.Acks) > 0 {
				ackedAt = now
			}
		}
		switch {
		case !recover && (failedAt == 0 || failedAt-start < DefaultRetrySpan):
			t.Fatalf("failed after %v, want at RetrySpan %v", time.Duration(failedAt-start), time.Duration(DefaultRetrySpan))
		case recover && ackedAt == 0:
			t.Fatal("a node set back within the retry span: the stripe was never acked")
		}
	}
}

// TestWriterCommitDuringBackoff: a stripe waiting out its retry backoff
// commits through a late reply of an older attempt and is rewritten (a
// live node refused it); the rewrite's one missing reply must still time
// out so the stripe finishes. (Found by the simulation, seed 202: the
// backoff's retry time stayed set and Tick never timed the rewrite out,
// the stripe in flight for good.)
func TestWriterCommitDuringBackoff(t *testing.T) {
	cfg := DefaultWriterConfig(params())
	cfg.MaxAttempts, cfg.DeliveryTimeout = 1, int64(10*time.Second)
	w := NewWriter(cfg)
	rnd := newRand(4)
	now := int64(base)
	id := sid(0, 1)
	first := w.Start(now, id)
	reply := func(s Send, node int, st Status) WriterOutput {
		return w.Reply(now, rnd, id, s.Attempt, node, st, now)
	}
	for node, st := range []Status{StatusOK, StatusOK, StatusOK, StatusSealed} {
		reply(first, node, st)
	}
	now += cfg.AttemptTimeout
	if out := w.Tick(now, rnd); len(out.Sends) != 0 || len(out.Fails) != 0 {
		t.Fatalf("timed-out attempt: %+v, want a backoff wait", out)
	}
	out := reply(first, 4, StatusOK) // late: commits, and node 3's SEALED asks for a rewrite
	if len(out.Acks) != 1 || len(out.Sends) != 1 {
		t.Fatalf("late reply: %+v, want an ack and a rewrite", out)
	}
	rewrite := out.Sends[0] // short of W with one reply missing: only its timeout ends it
	for node, st := range []Status{StatusOK, StatusOK, StatusOK, StatusSealed, StatusSealed} {
		reply(rewrite, node, st)
	}
	for end := now + 10*cfg.CommittedWait; now < end && w.InFlight() > 0; now += int64(time.Millisecond) {
		w.Tick(now, rnd)
	}
	if w.InFlight() != 0 {
		t.Fatal("the rewrite never timed out: stripe stuck in flight")
	}
}
