package core

import (
	"slices"
	"strings"
	"testing"

	"github.com/raidq/raidq/stripe"
)

// Offsets used by the reader tests (the reader starts at base).
var (
	o1 = base + ms2u(10)
	o2 = base + ms2u(60)
)

// until is a reader time past every wait of a row at o1: its InDoubtWait
// and its look-ahead (the frontier reaches o1+LookAhead at o1+LA+D).
func until() int64 {
	cfg := DefaultReaderConfig(params())
	return int64(o1+cfg.LookAhead) + int64(params().ReadDelay) + cfg.InDoubtWait
}

// TestReaderVerdicts: deliver, void and in-doubt by shards seen and nodes
// unheard (k=4, W=4, n=6), each driven to the end of every wait.
func TestReaderVerdicts(t *testing.T) {
	x := sid(0, 1)
	y := sid(1, 1)
	z := sid(2, 1)
	cases := []struct {
		name    string
		place   map[stripe.ID][]int // shards at o1, by node
		deaf    []int
		deliver []stripe.ID // delivered at o1, then the full stripe at o2
		voids   int
		doubt   []int // unheard nodes named in the one in-doubt report
	}{
		{name: "all heard, full", place: map[stripe.ID][]int{x: {0, 1, 2, 3, 4, 5}}, deliver: []stripe.ID{x}},
		{name: "all heard, 4 shards", place: map[stripe.ID][]int{x: {0, 2, 3, 5}}, deliver: []stripe.ID{x}},
		{name: "4 shards, 2 unheard", place: map[stripe.ID][]int{x: {0, 1, 2, 3}}, deaf: []int{4, 5}, deliver: []stripe.ID{x}},
		{name: "1 shard, 2 unheard: void", place: map[stripe.ID][]int{x: {0}}, deaf: []int{4, 5}, voids: 1},
		{name: "2 shards, 1 unheard: void", place: map[stripe.ID][]int{x: {0, 1}}, deaf: []int{5}, voids: 1},
		{name: "2 shards, 2 unheard: in doubt", place: map[stripe.ID][]int{x: {0, 1}}, deaf: []int{4, 5}, doubt: []int{4, 5}},
		{name: "3 shards, 1 unheard: in doubt", place: map[stripe.ID][]int{x: {0, 1, 2}}, deaf: []int{5}, doubt: []int{5}},
		{name: "3 shards, all heard: void", place: map[stripe.ID][]int{x: {0, 1, 2}}, voids: 1},
		{name: "3/3 split: void both", place: map[stripe.ID][]int{x: {0, 1, 2}, y: {3, 4, 5}}, voids: 2},
		{name: "2/2/2 split: void all", place: map[stripe.ID][]int{x: {0, 3}, y: {1, 4}, z: {2, 5}}, voids: 3},
		{name: "4/2 split", place: map[stripe.ID][]int{x: {0, 1, 4, 5}, y: {2, 3}}, deliver: []stripe.ID{x}, voids: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(6)
			for id, nodes := range tc.place {
				w.put(encode(t, id, o1, 2), nodes...)
			}
			tail := sid(3, 1)
			w.put(encode(t, tail, o2, 1), 0, 1, 2, 3, 4, 5)
			l := drive(newTestReader(), w, startNow(), until(), 10*ms, deafTo(tc.deaf...))
			var want [][]string
			for _, id := range tc.deliver {
				want = append(want, values(id, 2))
			}
			wantValues(t, l.values, append(want, values(tail, 1))...)
			if l.voids != tc.voids {
				t.Fatalf("%d voids, want %d", l.voids, tc.voids)
			}
			if tc.doubt == nil && len(l.inDoubt) != 0 {
				t.Fatalf("in doubt: %+v", l.inDoubt)
			}
			if tc.doubt != nil && (len(l.inDoubt) != 1 || !slices.Equal(l.inDoubt[0].Unheard, tc.doubt) || l.inDoubt[0].Offset != o1) {
				t.Fatalf("in doubt: %+v, want one at %d naming %v", l.inDoubt, o1, tc.doubt)
			}
		})
	}
}

// TestReaderInDoubtWaits: an in-doubt offset holds back everything after
// it, is re-asked of the unheard node, and is reported only once both its
// InDoubtWait and its look-ahead have passed.
func TestReaderInDoubtWaits(t *testing.T) {
	cfg := DefaultReaderConfig(params())
	w := newWorld(6)
	x, z := sid(0, 1), sid(1, 1)
	w.put(encode(t, x, o1, 2), 0, 1, 2)
	w.put(encode(t, z, o2, 1), 0, 1, 2, 3, 4, 5)
	start := startNow()
	l := drive(newTestReader(), w, start, until(), 10*ms, deafTo(5))
	if len(l.inDoubt) != 1 || l.inDoubt[0].Stripe != x || l.inDoubt[0].Seen != 3 {
		t.Fatalf("in doubt %+v", l.inDoubt)
	}
	at := l.doubtAt[0]
	if at < start+cfg.InDoubtWait || at < int64(o1+cfg.LookAhead)+int64(params().ReadDelay) {
		t.Fatalf("reported at %d, before the wait (%d) or the look-ahead (%d)",
			at, start+cfg.InDoubtWait, int64(o1+cfg.LookAhead)+int64(params().ReadDelay))
	}
	wantValues(t, l.values, values(z, 1))
	if l.delivered[0] < at {
		t.Fatal("a later stripe was delivered before the in-doubt offset was settled")
	}
	if min := int(cfg.InDoubtWait / cfg.RescanEvery); len(l.rescans) < min {
		t.Fatalf("%d rescans while waiting, want at least %d", len(l.rescans), min)
	}
	for _, sc := range l.rescans {
		if !slices.Equal(sc.Nodes, []int{5}) || sc.From != o1 {
			t.Fatalf("rescan %+v, want node 5 from %d", sc, o1)
		}
	}
}

// TestReaderLookAheadSkip: an in-doubt group whose stripe id is decodable
// later in the look-ahead is skipped without waiting; the copy is
// delivered once, at its own offset.
func TestReaderLookAheadSkip(t *testing.T) {
	w := newWorld(6)
	x, y := sid(0, 1), sid(1, 1)
	later := o1 + ms2u(300)
	w.put(encode(t, x, o1, 2), 0, 1, 2)
	w.put(encode(t, y, o2, 1), 0, 1, 2, 3, 4, 5)
	w.put(encode(t, x, later, 2), 0, 1, 2, 3, 4)
	start := startNow()
	l := drive(newTestReader(), w, start, until(), 10*ms, deafTo(5))
	wantValues(t, l.values, values(y, 1), values(x, 2))
	if len(l.inDoubt) != 0 || l.dups != 0 {
		t.Fatalf("in doubt %+v, %d duplicates", l.inDoubt, l.dups)
	}
	if got, want := l.delivered[0], int64(later)+int64(params().ReadDelay)+10*ms; got > want {
		t.Fatalf("delivered at %d, after the copy was in reach (%d)", got, want)
	}
}

// TestReaderCorrupt: a shard with a flipped byte is reported and counted
// as unheard: with spare shards the stripe is still delivered; with none
// it is in doubt, not void.
func TestReaderCorrupt(t *testing.T) {
	cases := []struct {
		name    string
		nodes   []int
		at      int // byte of node 0's shard to flip
		deliver bool
	}{
		{name: "data byte, 5 good left", nodes: []int{0, 1, 2, 3, 4, 5}, at: stripe.HeaderSize + 1, deliver: true},
		{name: "header byte, 5 good left", nodes: []int{0, 1, 2, 3, 4, 5}, at: 30, deliver: true},
		{name: "data byte, 3 good left", nodes: []int{0, 1, 2, 3}, at: stripe.HeaderSize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(6)
			x := sid(0, 1)
			w.put(encode(t, x, o1, 2), tc.nodes...)
			w[0][o1][tc.at] ^= 0x40
			l := drive(newTestReader(), w, startNow(), until(), 10*ms, deafTo())
			if len(l.corrupt) != 1 || l.corrupt[0].Node != 0 || l.corrupt[0].Offset != o1 {
				t.Fatalf("corrupt reports %+v", l.corrupt)
			}
			if tc.deliver {
				wantValues(t, l.values, values(x, 2))
				return
			}
			if len(l.values) != 0 || l.voids != 0 || len(l.inDoubt) != 1 || l.inDoubt[0].Seen != 3 {
				t.Fatalf("delivered %v, %d voids, in doubt %+v; want in doubt with 3 seen", l.values, l.voids, l.inDoubt)
			}
		})
	}
}

// TestReaderResume: a reader resumed at Position{off, idx} skips the
// records before idx at off and everything before off.
func TestReaderResume(t *testing.T) {
	w := newWorld(6)
	v, x, y := sid(0, 1), sid(0, 2), sid(0, 3)
	w.put(encode(t, v, o1-ms2u(5), 3), 0, 1, 2, 3, 4, 5)
	w.put(encode(t, x, o1, 5), 0, 1, 2, 3, 4, 5)
	w.put(encode(t, y, o2, 2), 0, 1, 2, 3)
	for idx := range uint32(6) {
		r := NewReader(DefaultReaderConfig(params()), Position{Offset: o1, Index: idx})
		l := drive(r, w, startNow(), until(), 10*ms, deafTo())
		wantValues(t, l.values, values(x, 5)[min(idx, 5):], values(y, 2))
		if want := (Position{Offset: r.Frontier()}); r.Pos() != want {
			t.Fatalf("position %v, want %v", r.Pos(), want)
		}
	}
}

// TestReaderDedupe: the same stripe id decodable at two offsets is
// delivered once, at the first.
func TestReaderDedupe(t *testing.T) {
	w := newWorld(6)
	x, y := sid(0, 1), sid(1, 1)
	w.put(encode(t, x, o1, 2), 0, 1, 2, 3, 4, 5)
	w.put(encode(t, y, o1+ms2u(20), 1), 0, 1, 2, 3, 4, 5)
	w.put(encode(t, x, o2, 2), 1, 2, 3, 4)
	l := drive(newTestReader(), w, startNow(), until(), 10*ms, deafTo())
	wantValues(t, l.values, values(x, 2), values(y, 1))
	if l.dups != 1 {
		t.Fatalf("%d duplicates, want 1", l.dups)
	}
}

// TestReaderRescanResolves: a committed stripe whose fourth shard sits on
// a node that was down at the main scan is delivered once a rescan hears
// that node, well before the in-doubt bounds.
func TestReaderRescanResolves(t *testing.T) {
	w := newWorld(6)
	x, z := sid(0, 1), sid(1, 1)
	w.put(encode(t, x, o1, 2), 0, 1, 2, 5)
	w.put(encode(t, z, o2, 1), 0, 1, 2, 3, 4, 5)
	start := startNow()
	back := start + 300*ms
	deaf := func(_ Scan, now int64, _ *Reader) []int {
		if now < back {
			return []int{5}
		}
		return nil
	}
	l := drive(newTestReader(), w, start, until(), 10*ms, deaf)
	wantValues(t, l.values, values(x, 2), values(z, 1))
	if len(l.inDoubt) != 0 || len(l.rescans) == 0 {
		t.Fatalf("in doubt %+v after %d rescans", l.inDoubt, len(l.rescans))
	}
	if l.delivered[0] < back || l.delivered[0] > back+DefaultReaderConfig(params()).RescanEvery {
		t.Fatalf("delivered at %d; node 5 answers from %d", l.delivered[0], back)
	}
}

// TestReaderStalled: a main scan with W or more nodes unheard could hide a
// whole committed stripe, and with more than n-k unheard none could be
// decoded, so it is refused and the reader does not move.
func TestReaderStalled(t *testing.T) {
	w := newWorld(6)
	x := sid(0, 1)
	w.put(encode(t, x, o1, 2), 0, 1, 2, 3)
	r := newTestReader()
	now := startNow()
	sc, ok := r.Next(now)
	if !ok || sc.Rescan || sc.From != base {
		t.Fatalf("first scan %+v %v", sc, ok)
	}
	out := r.Apply(now, sc, w.answer(sc, 2, 3, 4, 5))
	if !strings.Contains(out.Stalled, "only 2 of 6") || r.Frontier() != base || r.Pos() != (Position{Offset: base}) {
		t.Fatalf("stalled %q, frontier %d, pos %v", out.Stalled, r.Frontier(), r.Pos())
	}
	if again, _ := r.Next(now); again.From != sc.From || again.To != sc.To || again.Rescan {
		t.Fatalf("after a stall the reader asks %+v, want %+v again", again, sc)
	}
	// Three of six unheard (more than n-k): a committed stripe there
	// could not be decoded, so the reader waits instead of passing it.
	out = r.Apply(now, sc, w.answer(sc, 3, 4, 5))
	if !strings.Contains(out.Stalled, "only 3 of 6") || r.Frontier() != base {
		t.Fatalf("3 unheard: stalled %q, frontier %d", out.Stalled, r.Frontier())
	}
	out = r.Apply(now, sc, w.answer(sc, 4, 5))
	if out.Stalled != "" || r.Frontier() != sc.To {
		t.Fatalf("2 unheard: stalled %q, frontier %d", out.Stalled, r.Frontier())
	}
}

// TestReaderLookAheadBound: the look-ahead reaches offset+LookAhead
// inclusive (Next lets the frontier reach exactly one past it), so a copy
// right at the bound spares the in-doubt report.
func TestReaderLookAheadBound(t *testing.T) {
	cfg := DefaultReaderConfig(params())
	w := newWorld(6)
	x := sid(0, 1)
	w.put(encode(t, x, o1, 2), 0, 1, 2)
	w.put(encode(t, x, o1+cfg.LookAhead, 2), 0, 1, 2, 3, 4)
	l := drive(newTestReader(), w, startNow(), until()+int64(cfg.LookAhead), 10*ms, deafTo(5))
	if len(l.inDoubt) != 0 {
		t.Fatalf("in doubt %+v", l.inDoubt)
	}
	wantValues(t, l.values, values(x, 2))
}

// TestReaderRowsBehindHeadRescanned: while the head offset waits (node 4
// is gone for good), rows queued behind it, in its owner range and in the
// next, are re-asked of their own unheard nodes, so they are settled as
// soon as the head is.
func TestReaderRowsBehindHeadRescanned(t *testing.T) {
	w := newWorld(6)
	x, y, z := sid(0, 1), sid(1, 1), sid(2, 1)
	oy, oz := o1+ms2u(1), base+RangeNanos+ms2u(10)
	w.put(encode(t, x, o1, 2), 0, 1, 2)
	w.put(encode(t, y, oy, 2), 0, 1, 2, 5)
	w.put(encode(t, z, oz, 2), 0, 1, 2, 3)
	start := startNow()
	// Node 5 is unheard before back5, node 3 from then until back3 (at
	// most two unheard at once: with three the reader would wait).
	back5, back3 := start+300*ms, start+1200*ms
	deaf := func(_ Scan, now int64, _ *Reader) []int {
		switch {
		case now < back5:
			return []int{4, 5}
		case now < back3:
			return []int{3, 4}
		}
		return []int{4}
	}
	l := drive(newTestReader(), w, start, until(), 10*ms, deaf)
	if len(l.inDoubt) != 1 || l.inDoubt[0].Stripe != x {
		t.Fatalf("in doubt %+v, want only x", l.inDoubt)
	}
	wantValues(t, l.values, values(y, 2), values(z, 2))
	for _, c := range []struct {
		off  uint64
		node int
		back int64
	}{{oy, 5, back5}, {oz, 3, back3}} {
		asked := false
		for i, sc := range l.rescans {
			at := l.rescanAt[i]
			asked = asked || (sc.From <= c.off && c.off < sc.To && slices.Contains(sc.Nodes, c.node) &&
				at >= c.back && at < l.doubtAt[0])
		}
		if !asked {
			t.Fatalf("offset %d was not re-asked of node %d while the head waited", c.off, c.node)
		}
	}
	if l.delivered[0] != l.doubtAt[0] || l.delivered[2] != l.doubtAt[0] {
		t.Fatalf("y and z delivered at %v, not with the head's report at %d", l.delivered, l.doubtAt[0])
	}
}

// TestRetryLandsTwice: a stripe whose first attempt times out but later
// commits, and whose retry commits too, is acked once and delivered once.
func TestRetryLandsTwice(t *testing.T) {
	c := newCluster(params().N)
	pr := newProducer(0)
	rnd := newRand(5)
	now := int64(base) + 20*ms
	s0 := pr.start(t, now, 1)
	var late []Status // attempt 0 lands everywhere; its replies are slow
	for i := range c.owners {
		late = append(late, c.write(now, i, pr.shards[s0.ID]))
	}
	now += pr.w.cfg.AttemptTimeout
	retry := sends(pr.w.Tick(now, rnd))
	if len(retry) != 1 || retry[0].ID != s0.ID {
		t.Fatalf("tick: %+v", retry)
	}
	pr.take(t, WriterOutput{Sends: retry[:1]})
	settle(t, c, now, []flight{{pr, retry[0]}})
	for i, st := range late {
		pr.take(t, pr.w.Reply(now+10*ms, rnd, s0.ID, 0, i, st, 0))
	}
	if got := c.committed()[s0.ID]; len(got) != 2 || pr.acks[s0.ID] != retry[0].Offset || pr.done[s0.ID] != 1 {
		t.Fatalf("committed at %v, acked at %d (retry at %d), done %d", got, pr.acks[s0.ID], retry[0].Offset, pr.done[s0.ID])
	}
	l := drive(newTestReader(), c.disk, startNow(), until()+int64(RangeNanos), 10*ms, deafTo())
	wantValues(t, l.values, values(s0.ID, 3))
	if l.dups != 1 {
		t.Fatalf("%d duplicates, want 1", l.dups)
	}
}
