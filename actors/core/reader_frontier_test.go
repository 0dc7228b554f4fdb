package core

import (
	"testing"
)

// closeAt sets each node's Closed in results (by node) to closed[node],
// dropping its entries at or above it, as a closing scan answers.
func closeAt(results []NodeResult, closed map[int]uint64) []NodeResult {
	for i := range results {
		c, ok := closed[results[i].Node]
		if !ok || !results[i].Heard {
			continue
		}
		results[i].Closed = c
		var keep []Entry
		for _, e := range results[i].Entries {
			if e.Offset < c {
				keep = append(keep, e)
			}
		}
		results[i].Entries = keep
	}
	return results
}

// TestReaderFrontierIsTheQuorumClosure: the frontier of a main scan is the
// (n-W+1)-th highest offset the heard nodes closed (3rd of 6 with W=4),
// and a scan the nodes closed less of says Short.
func TestReaderFrontierIsTheQuorumClosure(t *testing.T) {
	half := base + ms2u(500)
	cases := []struct {
		name   string
		closed map[int]uint64
		want   func(sc Scan) uint64
	}{
		{"all closed", map[int]uint64{}, func(sc Scan) uint64 { return sc.To }},
		{"three closed, three half", map[int]uint64{3: half, 4: half, 5: half}, func(sc Scan) uint64 { return sc.To }},
		{"two closed, four half", map[int]uint64{2: half, 3: half, 4: half, 5: half}, func(Scan) uint64 { return half }},
		{"all below from", map[int]uint64{0: base, 1: base, 2: base, 3: base, 4: base, 5: base}, func(sc Scan) uint64 { return sc.From }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestReader()
			sc, ok := r.Next(int64(base + RangeNanos + uint64(params().ReadDelay)))
			if !ok || sc.To != base+RangeNanos {
				t.Fatalf("want a scan of the whole range, got %+v", sc)
			}
			out := r.Apply(int64(sc.To), sc, closeAt(newWorld(6).answer(sc), tc.closed))
			if want := tc.want(sc); r.Frontier() != want || out.Short != (want < sc.To) {
				t.Fatalf("frontier %d short %v, want %d", r.Frontier()-base, out.Short, want-base)
			}
		})
	}
}

// TestReaderOpenNodesAreUnheard: below the frontier, a node that closed
// less than an offset counts as unheard there, not empty. A stripe seen
// on closed nodes and still completing on open ones is in doubt (waited
// for, then delivered from the open nodes once they close); one with two
// shards on open nodes only, above their Closed, is never even seen: with
// three nodes closed there it cannot commit.
func TestReaderOpenNodesAreUnheard(t *testing.T) {
	x, y := sid(0, 1), sid(1, 1)
	w := newWorld(6)
	sx := encode(t, x, o1, 1)
	w.put(sx, 0, 1, 2) // 3 shards; nodes 3..5 open at o1 on the first scan
	w.put(encode(t, y, o2, 1), 4, 5)
	r := newTestReader()
	now := int64(base + RangeNanos + uint64(params().ReadDelay))
	sc, _ := r.Next(now)
	open := map[int]uint64{3: o1, 4: o1, 5: o1}
	out := r.Apply(now, sc, closeAt(w.answer(sc), open))
	if r.Frontier() != sc.To || len(out.Deliveries) != 0 || out.Voids != 0 {
		t.Fatalf("frontier %d, out %+v: x must wait for the open nodes", r.Frontier()-base, out)
	}
	// The stripe completes on node 3 and the nodes close past o1: the
	// rescan of the unheard (open) nodes delivers x; y is passed.
	w.put(sx, 3)
	rs, ok := r.Next(now + r.cfg.RescanEvery)
	if !ok || !rs.Rescan || len(rs.Nodes) != 3 {
		t.Fatalf("want a rescan of the three open nodes, got %+v", rs)
	}
	out = r.Apply(now+r.cfg.RescanEvery, rs, w.answer(rs))
	if len(out.Deliveries) != 1 || out.Deliveries[0].Stripe != x || r.Pos().Offset <= o2 {
		t.Fatalf("after the rescan: %+v at %v, want x delivered and y passed", out, r.Pos())
	}
}
