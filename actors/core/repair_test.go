package core

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/invariants/invariantstest"
)

// TestRepairOwnerWrite checks every answer of Owner.RepairWrite (docs/design.md#repair-and-scrub).
func TestRepairOwnerWrite(t *testing.T) {
	mid := base + RangeNanos/2
	a := encode(t, sid(0, 1), mid, 2)
	b := encode(t, sid(1, 1), mid, 2)
	far := encode(t, sid(0, 2), mid+300*uint64(ms), 2)
	out := encode(t, sid(0, 3), base+RangeNanos, 2)
	cases := []struct {
		name                      string
		seal, birth               uint64
		first                     *stripe.Shard
		corrupt                   bool
		shard                     stripe.Shard
		now                       int64 // 0 = mid
		want                      Status
		persist, barrier, replace bool
		// misrouted: the offset is outside the owner's range, which the
		// node's routing rules out; an invariant violation, and want is
		// the released binary's answer.
		misrouted bool
	}{
		{name: "empty slot", shard: a[2], want: StatusOK, persist: true},
		{name: "empty slot below the seal", seal: base + RangeNanos, shard: a[2], want: StatusOK, persist: true},
		{name: "empty slot long after the accept window", now: int64(mid) + 3600*int64(RangeNanos), shard: a[2], want: StatusOK, persist: true},
		{name: "empty slot before the birth", birth: mid + 1, shard: a[2], want: StatusOK, persist: true},
		{name: "future bound still holds", shard: far[2], want: StatusClockAhead},
		{name: "same shard there", first: &a[2], shard: a[2], want: StatusOK, barrier: true},
		{name: "other stripe there", first: &b[2], shard: a[2], want: StatusConflict},
		{name: "other index there", first: &a[1], shard: a[2], want: StatusConflict},
		{name: "corrupt shard there", first: &b[2], corrupt: true, shard: a[2], want: StatusOK, persist: true, replace: true},
		{name: "outside the range", shard: out[2], want: StatusBadRequest, misrouted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ownerCfg()
			cfg.Birth = tc.birth
			slots := map[uint64]SlotInfo{}
			if f := tc.first; f != nil {
				slots[f.Offset] = SlotInfo{ID: f.ID, Index: f.Index, DataCRC: f.DataCRC}
			}
			o := NewOwner(cfg, tc.seal, slots)
			now := tc.now
			if now == 0 {
				now = int64(mid)
			}
			write := func() WriteDecision { return o.RepairWrite(now, tc.shard.Offset, &tc.shard.ShardHeader, tc.corrupt) }
			var d WriteDecision
			if tc.misrouted {
				invariantstest.Off(func() { d = write() })
			} else {
				d = write()
			}
			if d.Status != tc.want || d.Persist != tc.persist || d.Barrier != tc.barrier || d.Replace != tc.replace {
				t.Fatalf("got %v persist=%v barrier=%v replace=%v (%s)", d.Status, d.Persist, d.Barrier, d.Replace, d.Detail)
			}
			if d.Status != StatusOK && d.Detail == "" {
				t.Fatal("refusal without detail")
			}
			if d.Status == StatusOK && !o.Occupied(tc.shard.Offset) {
				t.Fatal("slot not occupied after an accepted repair")
			}
			if tc.misrouted {
				invariantstest.Fires(t, "repair write at offset", func() { write() })
			}
		})
	}
}

// TestRepairRacesLateOriginal: a repaired shard is byte-identical to the
// producer's, so whichever of the repair and a late original reaches the
// owner first, the other is answered OK without a second commit and the
// slot holds the same bytes.
func TestRepairRacesLateOriginal(t *testing.T) {
	mid := base + RangeNanos/2
	orig := encode(t, sid(0, 1), mid, 7)
	cfg := RepairConfig{Params: params(), Pos: 2}
	fix := fixFor(orig, 2, []int{0, 1, 3, 4, 5})
	rebuilt, err := RebuildShard(cfg, fix, fetched(orig, 0, 1, 3, 4))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rebuilt, orig[2].Marshal()) {
		t.Fatal("rebuilt shard is not byte-identical to the original")
	}
	h, err := stripe.ParseHeader(rebuilt)
	if err != nil {
		t.Fatal(err)
	}
	now := int64(mid) // the original is still inside the accept window
	for _, repairFirst := range []bool{true, false} {
		o := NewOwner(ownerCfg(), 0, nil)
		var d1, d2 WriteDecision
		if repairFirst {
			d1 = o.RepairWrite(now, mid, &h, false)
			d2 = o.Write(now, mid, &orig[2].ShardHeader, false)
		} else {
			d1 = o.Write(now, mid, &orig[2].ShardHeader, false)
			d2 = o.RepairWrite(now, mid, &h, false)
		}
		if d1.Status != StatusOK || !d1.Persist || d2.Status != StatusOK || d2.Persist || !d2.Barrier {
			t.Fatalf("repair first=%v: first %+v, second %+v", repairFirst, d1, d2)
		}
	}
}

// TestRepairUnknown: below the birth a scan is UNKNOWN until the repaired
// mark passes it, and at holes for good.
func TestRepairUnknown(t *testing.T) {
	cfg := ownerCfg()
	birth := base + 600*uint64(ms)
	cfg.Birth = birth
	o := NewOwner(cfg, 0, nil)
	scan := func(from, to uint64) bool {
		t.Helper()
		d := o.Scan(int64(base+RangeNanos), from, to, false)
		if d.Status != StatusOK {
			t.Fatalf("scan [%d,%d): %v", from, to, d.Status)
		}
		return d.Unknown
	}
	if !scan(base, base+10) || !scan(birth-1, birth+1) || scan(birth, birth+10) {
		t.Fatal("before SetRepaired: unknown exactly below the birth")
	}
	hole := base + 100*uint64(ms)
	o.SetRepaired(base+300*uint64(ms), []uint64{base - 5, hole, base + RangeNanos + 5})
	for _, c := range []struct {
		from, to uint64
		want     bool
	}{
		{base, hole, false},
		{hole, hole + 1, true},
		{hole + 1, base + 300*uint64(ms), false},
		{base + 300*uint64(ms) - 1, base + 300*uint64(ms) + 1, true},
		{base + 400*uint64(ms), birth, true},
		{birth, base + RangeNanos, false},
	} {
		if got := scan(c.from, c.to); got != c.want {
			t.Errorf("scan [%d,%d) unknown=%v, want %v", c.from-base, c.to-base, got, c.want)
		}
	}
	o.SetRepaired(birth, nil)
	if scan(base, base+RangeNanos) {
		t.Fatal("fully repaired range still unknown")
	}
}

// fixFor builds the Fix PlanRange would for stripe s missing at pos, seen
// on members.
func fixFor(s []stripe.Shard, pos int, members []int) Fix {
	f := Fix{Offset: s[0].Offset, Group: s[members[0]].ShardHeader, Headers: make([]*stripe.ShardHeader, len(s))}
	for _, i := range members {
		h := s[i].ShardHeader
		f.Headers[i] = &h
		f.Sources = append(f.Sources, i)
	}
	return f
}

func fetched(s []stripe.Shard, positions ...int) map[int][]byte {
	out := map[int][]byte{}
	for _, i := range positions {
		out[i] = s[i].Marshal()
	}
	return out
}

func headers(e []Entry) []Entry {
	out := make([]Entry, len(e))
	for i, x := range e {
		out[i] = Entry{Offset: x.Offset, Shard: x.Shard[:stripe.HeaderSize]}
	}
	return out
}

// peersOf answers a headers-only scan from the world for every position but
// self; positions in young answer UNKNOWN (heard, not complete) and those
// in deaf not at all.
func peersOf(w world, from, to uint64, self int, young, deaf []int) []PeerScan {
	var out []PeerScan
	for _, r := range w.answer(Scan{From: from, To: to, Nodes: []int{0, 1, 2, 3, 4, 5}}) {
		if r.Node == self {
			continue
		}
		ps := PeerScan{Node: r.Node, Heard: !contains(deaf, r.Node), Complete: !contains(deaf, r.Node) && !contains(young, r.Node)}
		if ps.Heard {
			ps.Entries = headers(r.Entries)
		}
		out = append(out, ps)
	}
	return out
}

func localOf(w world, self int, from, to uint64) []LocalSlot {
	var out []LocalSlot
	for off, b := range w[self] {
		if off >= from && off < to {
			out = append(out, CheckLocal(off, b))
		}
	}
	slices.SortFunc(out, func(a, b LocalSlot) int { return int(a.Offset - b.Offset) })
	return out
}

// TestPlanRange checks PlanRange's verdicts offset by offset.
func TestPlanRange(t *testing.T) {
	const self = 2
	at := func(i int) uint64 { return base + uint64(i)*10*uint64(ms) }
	birth := at(50)
	cfg := RepairConfig{Params: params(), Pos: self, Birth: birth}

	w := newWorld(6)
	missing := encode(t, sid(0, 1), at(1), 3) // everywhere but self
	w.put(missing, 0, 1, 3, 4, 5)
	have := encode(t, sid(0, 2), at(2), 3) // self too
	w.put(have, 0, 1, 2, 3, 4, 5)
	partial := encode(t, sid(0, 3), at(3), 3) // self and 3 others: below n
	w.put(partial, 0, 2, 4, 5)
	corrupt := encode(t, sid(0, 4), at(4), 3)
	w.put(corrupt, 0, 1, 2, 3, 4)
	bad := bytes.Clone(w[self][at(4)])
	bad[len(bad)-1] ^= 1
	w[self][at(4)] = bad
	three := encode(t, sid(0, 5), at(5), 3) // 3 of k=4 elsewhere, below the birth: a hole
	w.put(three, 0, 1, 3)
	two := encode(t, sid(0, 6), at(6), 3) // 2 elsewhere: void
	w.put(two, 0, 1)
	threeLate := encode(t, sid(0, 7), at(60), 3) // 3 elsewhere above the birth: nothing to say
	w.put(threeLate, 0, 1, 3)

	plan := PlanRange(cfg, base, base+RangeNanos, localOf(w, self, base, base+RangeNanos), peersOf(w, base, base+RangeNanos, self, nil, nil), false)
	if len(plan.Fixes) != 2 {
		t.Fatalf("%d fixes, want 2: %+v", len(plan.Fixes), plan.Fixes)
	}
	f := plan.Fixes[0]
	if f.Offset != at(1) || f.Replace || !slices.Equal(f.Sources, []int{0, 1, 3, 4, 5}) || f.Group.ID != missing[0].ID {
		t.Errorf("fix of the missing shard: %+v", f)
	}
	if f := plan.Fixes[1]; f.Offset != at(4) || !f.Replace || !slices.Equal(f.Sources, []int{0, 1, 3, 4}) {
		t.Errorf("fix of the corrupt shard: %+v", f)
	}
	if !slices.Equal(plan.Holes, []uint64{at(5)}) || len(plan.Unresolved) != 0 {
		t.Errorf("holes %v unresolved %v", plan.Holes, plan.Unresolved)
	}
	if !plan.Complete || !plan.Resolved || !plan.Settled || plan.BelowN != 3 {
		t.Errorf("complete=%v resolved=%v settled=%v belowN=%d (want true true true 3)", plan.Complete, plan.Resolved, plan.Settled, plan.BelowN)
	}
	if len(plan.Corrupt) != 1 || plan.Corrupt[0].Node != self || plan.Corrupt[0].Offset != at(4) {
		t.Errorf("corrupt %+v", plan.Corrupt)
	}

	// One peer young (UNKNOWN): it lists all it has and only regains
	// shards of decodable stripes, so nothing more can become decodable
	// and what is undecided is final: the 3-of-4 stripe is a hole, and so
	// is the 2-shard one now (with the young peer and this node it could
	// have reached W). Every committed stripe still shows on a complete
	// peer, so the range is resolved.
	plan = PlanRange(cfg, base, base+RangeNanos, localOf(w, self, base, base+RangeNanos), peersOf(w, base, base+RangeNanos, self, []int{5}, nil), false)
	if plan.Complete || !plan.Resolved || !plan.Settled || !slices.Equal(plan.Holes, []uint64{at(5), at(6)}) || len(plan.Unresolved) != 0 || len(plan.Fixes) != 2 {
		t.Errorf("with a young peer: %+v", plan)
	}
	// Three young peers: with this node, four wiped nodes could have held
	// a whole committed stripe that nobody shows; never resolved.
	plan = PlanRange(cfg, base, base+RangeNanos, localOf(w, self, base, base+RangeNanos), peersOf(w, base, base+RangeNanos, self, []int{3, 4, 5}, nil), false)
	if plan.Resolved {
		t.Error("resolved with three young peers")
	}
	// A deaf peer could hold the fourth shard of the 3-of-4 stripes.
	plan = PlanRange(cfg, base, base+RangeNanos, localOf(w, self, base, base+RangeNanos), peersOf(w, base, base+RangeNanos, self, nil, []int{5}), false)
	if plan.Settled || plan.Resolved || len(plan.Fixes) != 2 {
		t.Errorf("with a deaf peer: settled=%v resolved=%v fixes=%d", plan.Settled, plan.Resolved, len(plan.Fixes))
	}
	// Three peers deaf: a committed stripe could hide on them and self.
	empty := newWorld(6)
	plan = PlanRange(cfg, base, base+RangeNanos, nil, peersOf(empty, base, base+RangeNanos, self, nil, []int{0, 1, 3}), false)
	if plan.Resolved {
		t.Error("resolved with three of five peers unheard")
	}
	plan = PlanRange(cfg, base, base+RangeNanos, nil, peersOf(empty, base, base+RangeNanos, self, nil, []int{0, 1}), false)
	if !plan.Resolved || !plan.Settled || plan.Complete {
		t.Errorf("two peers unheard, nothing seen: resolved=%v settled=%v complete=%v, want true true false", plan.Resolved, plan.Settled, plan.Complete)
	}
	plan = PlanRange(cfg, base, base+RangeNanos, nil, peersOf(empty, base, base+RangeNanos, self, nil, []int{0, 1, 3, 4}), false)
	if plan.Settled {
		t.Error("settled with k peers unheard: a stripe could sit decodable on them")
	}

	// A peer's bad header is reported and counted as unknown.
	w2 := newWorld(6)
	s := encode(t, sid(0, 8), at(1), 3)
	w2.put(s, 0, 1, 3)
	w2[4][at(1)] = []byte("garbage that is not a shard header at all, long enough to parse a header from it...")
	peers := peersOf(w2, base, base+RangeNanos, self, nil, nil)
	plan = PlanRange(RepairConfig{Params: params(), Pos: self}, base, base+RangeNanos, nil, peers, false)
	if len(plan.Corrupt) != 1 || plan.Corrupt[0].Node != 4 || len(plan.Fixes) != 0 {
		t.Errorf("bad peer header: %+v", plan)
	}

	// Probe: Next is the first occupied offset after the range.
	peers = peersOf(empty, base, base+RangeNanos, self, nil, nil)
	plan = PlanRange(cfg, base, base+RangeNanos, nil, peers, true)
	if plan.Next != math.MaxUint64 {
		t.Errorf("next %d with nothing after, want MaxUint64", plan.Next)
	}
	peers[1].After, peers[3].After = base+7*RangeNanos+5, base+3*RangeNanos+9
	if plan = PlanRange(cfg, base, base+RangeNanos, nil, peers, true); plan.Next != base+3*RangeNanos+9 {
		t.Errorf("next %d, want the lowest After", plan.Next)
	}
	peers[0].Heard, peers[0].Complete = false, false
	if plan = PlanRange(cfg, base, base+RangeNanos, nil, peers, true); plan.Next != base+RangeNanos {
		t.Errorf("next %d with a peer unheard, want the range end", plan.Next)
	}
}

// TestRebuildShardChecks: a rebuild is refused unless every fetched shard
// and every header seen re-encodes exactly.
func TestRebuildShardChecks(t *testing.T) {
	mid := base + RangeNanos/2
	s := encode(t, sid(0, 1), mid, 9)
	cfg := RepairConfig{Params: params(), Pos: 5}
	fix := fixFor(s, 5, []int{0, 1, 2, 3, 4})
	for _, from := range [][]int{{0, 1, 2, 3}, {1, 2, 3, 4}, {0, 2, 3, 4, 1}} {
		got, err := RebuildShard(cfg, fix, fetched(s, from...))
		if err != nil || !bytes.Equal(got, s[5].Marshal()) {
			t.Fatalf("rebuild from %v: %v", from, err)
		}
	}
	if _, err := RebuildShard(cfg, fix, fetched(s, 0, 1, 2)); !errors.Is(err, stripe.ErrTooFewShards) {
		t.Errorf("three shards: %v", err)
	}
	// Another stripe's shard at one position.
	other := encode(t, sid(1, 1), mid, 9)
	f := fetched(s, 0, 1, 2)
	f[3] = other[3].Marshal()
	if _, err := RebuildShard(cfg, fix, f); !errors.Is(err, ErrRebuild) {
		t.Errorf("foreign shard: %v", err)
	}
	// A header seen on a peer that the re-encoding contradicts.
	fix2 := fixFor(s, 5, []int{0, 1, 2, 3, 4})
	h := *fix2.Headers[4]
	h.DataCRC ^= 1
	fix2.Headers[4] = &h
	if _, err := RebuildShard(cfg, fix2, fetched(s, 0, 1, 2, 3)); !errors.Is(err, ErrRebuild) {
		t.Errorf("contradicting header: %v", err)
	}
	// A fetched shard with a bad CRC.
	f = fetched(s, 0, 1, 2, 3)
	f[1][len(f[1])-1] ^= 1
	if _, err := RebuildShard(cfg, fix, f); !errors.Is(err, stripe.ErrCorruptShard) {
		t.Errorf("corrupt fetched shard: %v", err)
	}
}

// TestRepairSpans checks which time a pass walks.
func TestRepairSpans(t *testing.T) {
	sec := int64(RangeNanos)
	now := int64(base) + 1000*sec
	at := func(s int64) uint64 { return uint64(now + s*sec) }
	c := SpanConfig{Created: at(-5000), Window: 60 * sec, CatchUp: 600 * sec, Horizon: 2 * sec}
	check := func(name string, c SpanConfig, want ...Span) {
		t.Helper()
		if got := RepairSpans(now, c); !slices.Equal(got, want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	check("old node: the window", c, Span{From: at(-60), To: at(-2)})
	young := c
	young.Birth = at(-100)
	check("young node: the gap since the topic's creation, then the window", young,
		Span{From: at(-5000), To: at(-100), Gap: true}, Span{From: at(-60), To: at(-2)})
	young.Repaired = at(-200)
	check("repaired part of the gap", young, Span{From: at(-200), To: at(-100), Gap: true}, Span{From: at(-60), To: at(-2)})
	young.Birth = at(-30)
	check("window starts after the gap", young, Span{From: at(-200), To: at(-30), Gap: true}, Span{From: at(-30), To: at(-2)})
	young.Repaired = at(-30)
	check("gap done", young, Span{From: at(-30), To: at(-2)})
	young.Birth, young.Repaired = at(-1), 0
	check("born within the horizon", young, Span{From: at(-5000), To: at(-2), Gap: true})
	floored := c
	floored.Floor = at(-10)
	check("retention floor", floored, Span{From: at(-10), To: at(-2)})
	resumed := c
	resumed.Verified = at(-300)
	check("resume from verified", resumed, Span{From: at(-300), To: at(-2)})
	resumed.Verified = at(-3000)
	check("resume bounded by catch-up", resumed, Span{From: at(-600), To: at(-2)})
	resumed.Verified = at(-10)
	check("verified inside the window", resumed, Span{From: at(-60), To: at(-2)})
	fresh := c
	fresh.Created = at(-1)
	check("topic younger than the horizon", fresh)
}

// TestStripeAt finds a stripe's shards by id at one offset.
func TestStripeAt(t *testing.T) {
	mid := base + RangeNanos/2
	s := encode(t, sid(0, 1), mid, 4)
	w := newWorld(6)
	w.put(s, 0, 2, 4, 5)
	cfg := RepairConfig{Params: params(), Pos: 2}
	peers := peersOf(w, mid, mid+1, 2, nil, []int{1})
	ref, members, heard := StripeAt(cfg, mid, s[0].ID, localOf(w, 2, mid, mid+1), peers)
	if ref.ID != s[0].ID || !slices.Equal(members, []int{0, 2, 4, 5}) || !slices.Equal(heard, []int{0, 2, 3, 4, 5}) {
		t.Fatalf("ref %s members %v heard %v", ref.ID, members, heard)
	}
	if _, m, _ := StripeAt(cfg, mid, sid(9, 9), localOf(w, 2, mid, mid+1), peers); len(m) != 0 {
		t.Fatalf("another id found at %v", m)
	}
}
