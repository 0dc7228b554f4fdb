package core

import (
	"strings"
	"testing"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/invariants/invariantstest"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestOwnerWrite checks every answer of Owner.Write (docs/design.md#write-path step 5, docs/design.md#slot-store).
// Each case starts from a fresh owner of [base, base+1s), optionally with a
// seal, an incarnation birth and a shard already written; now is the node
// clock in the middle of the range unless the case says otherwise.
func TestOwnerWrite(t *testing.T) {
	mid := base + RangeNanos/2
	a := encode(t, sid(0, 1), mid, 2)
	b := encode(t, sid(1, 1), mid, 2)
	aFar := encode(t, sid(0, 2), mid+300*uint64(ms), 2)
	aOld := encode(t, sid(0, 3), mid-300*uint64(ms), 2)
	aEdge := encode(t, sid(0, 4), mid-250*uint64(ms), 2)
	aOut := encode(t, sid(0, 5), base+RangeNanos, 2)
	a1 := a[1]
	cases := []struct {
		name    string
		seal    uint64
		birth   uint64
		first   *stripe.Shard // already in the slot (as rebuilt from the store)
		shard   stripe.Shard
		off     uint64 // 0 = the shard's offset
		now     int64  // 0 = mid
		repair  bool
		want    Status
		persist bool
		barrier bool
		// misrouted: the offset is outside the owner's range, which the
		// driver's routing rules out; an invariant violation, and want is
		// the released binary's answer.
		misrouted bool
	}{
		{name: "empty slot", shard: a[0], want: StatusOK, persist: true},
		{name: "same shard again", first: &a[0], shard: a[0], want: StatusOK, barrier: true},
		{name: "other stripe", first: &a[0], shard: b[0], want: StatusConflict},
		{name: "other index of same stripe", first: &a[0], shard: a1, want: StatusConflict},
		{name: "below seal", seal: mid + 1, shard: a[0], want: StatusSealed},
		{name: "at seal", seal: mid, shard: a[0], want: StatusOK, persist: true},
		{name: "same shard below seal", first: &a[0], seal: mid + 1, shard: a[0], want: StatusOK, barrier: true},
		{name: "older than accept window", shard: aOld[0], want: StatusSealed},
		{name: "at accept window edge", shard: aEdge[0], want: StatusOK, persist: true},
		{name: "beyond future bound", shard: aFar[0], want: StatusClockAhead},
		{name: "future is fine later", shard: aFar[0], now: int64(mid) + 100*ms, want: StatusOK, persist: true},
		{name: "before birth", birth: mid + 1, shard: a[0], want: StatusSealed},
		{name: "repair flag from the wire refused (RepairWrite is the way in)", seal: mid + 1, shard: a[0], repair: true, want: StatusBadRequest},
		{name: "outside range", shard: aOut[0], want: StatusBadRequest, misrouted: true},
		{name: "offset disagrees with shard", shard: a[0], off: mid + 1, want: StatusBadRequest},
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
			off := tc.off
			if off == 0 {
				off = tc.shard.Offset
			}
			write := func() WriteDecision { return o.Write(now, off, &tc.shard.ShardHeader, tc.repair) }
			var d WriteDecision
			if tc.misrouted {
				invariantstest.Off(func() { d = write() })
			} else {
				d = write()
			}
			if d.Status != tc.want || d.Persist != tc.persist || d.Barrier != tc.barrier {
				t.Fatalf("got %v persist=%v barrier=%v (%s), want %v persist=%v barrier=%v",
					d.Status, d.Persist, d.Barrier, d.Detail, tc.want, tc.persist, tc.barrier)
			}
			if d.Status != StatusOK && d.Detail == "" {
				t.Fatal("refusal without detail")
			}
			if tc.misrouted {
				invariantstest.Fires(t, "write at offset", func() { write() })
			}
		})
	}
}

// TestOwnerScan checks Owner.Scan: bounds, sealing, the refusal to seal the
// node's future, and the incarnation flag.
func TestOwnerScan(t *testing.T) {
	mid := base + RangeNanos/2
	now := int64(mid)
	cases := []struct {
		name     string
		seal     uint64
		birth    uint64
		from, to uint64
		doSeal   bool
		want     Status
		wantSeal uint64
		persist  bool
		unknown  bool
		// misrouted: from is outside the owner's range (see TestOwnerWrite).
		misrouted bool
	}{
		{name: "seals up to to", from: base, to: mid - 10, doSeal: true, want: StatusOK, wantSeal: mid - 10, persist: true},
		{name: "no seal asked", from: base, to: mid - 10, want: StatusOK},
		{name: "already sealed beyond", seal: mid, from: base, to: mid - 10, doSeal: true, want: StatusOK, wantSeal: mid},
		{name: "up to now", from: base, to: mid, doSeal: true, want: StatusOK, wantSeal: mid, persist: true},
		{name: "future refused", from: base, to: mid + 1, doSeal: true, want: StatusClockAhead},
		{name: "future read without seal", from: base, to: mid + 1, want: StatusOK},
		{name: "crosses range end", from: mid - 10, to: base + RangeNanos + 1, doSeal: true, want: StatusBadRequest},
		{name: "starts before range", from: base - 1, to: base + 10, doSeal: true, want: StatusBadRequest, misrouted: true},
		{name: "empty", from: base + 10, to: base + 10, doSeal: true, want: StatusBadRequest},
		{name: "before birth", birth: base + 100, from: base, to: base + 200, doSeal: true, want: StatusOK, wantSeal: base + 200, persist: true, unknown: true},
		{name: "after birth", birth: base + 100, from: base + 100, to: base + 200, doSeal: true, want: StatusOK, wantSeal: base + 200, persist: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ownerCfg()
			cfg.Birth = tc.birth
			o := NewOwner(cfg, tc.seal, nil)
			scan := func() ScanDecision { return o.Scan(now, tc.from, tc.to, tc.doSeal) }
			var d ScanDecision
			if tc.misrouted {
				invariantstest.Off(func() { d = scan() })
			} else {
				d = scan()
			}
			if d.Status != tc.want {
				t.Fatalf("status %v (%s), want %v", d.Status, d.Detail, tc.want)
			}
			if d.Status != StatusOK {
				if o.Seal() != tc.seal {
					t.Fatalf("refused scan moved the seal to %d", o.Seal())
				}
				if tc.misrouted {
					invariantstest.Fires(t, "scan at offset", func() { scan() })
				}
				return
			}
			want := max(tc.wantSeal, tc.seal)
			if d.Seal != want || o.Seal() != want || d.PersistSeal != tc.persist || d.Unknown != tc.unknown {
				t.Fatalf("seal %d/%d persist=%v unknown=%v, want %d persist=%v unknown=%v",
					d.Seal, o.Seal(), d.PersistSeal, d.Unknown, want, tc.persist, tc.unknown)
			}
		})
	}
}

// TestOwnerScanSealsWrites: once a scan sealed [from,to), writes there are
// refused even inside the accept window, and writes above still land.
func TestOwnerScanSealsWrites(t *testing.T) {
	mid := base + RangeNanos/2
	now := int64(mid)
	o := NewOwner(ownerCfg(), 0, nil)
	if d := o.Scan(now, base, mid-ms2u(10), true); d.Status != StatusOK {
		t.Fatal(d.Detail)
	}
	below := encode(t, sid(0, 1), mid-ms2u(20), 1)
	above := encode(t, sid(0, 2), mid-ms2u(10), 1)
	if d := o.Write(now, below[0].Offset, &below[0].ShardHeader, false); d.Status != StatusSealed {
		t.Fatalf("write below the fresh seal: %v", d.Status)
	}
	if d := o.Write(now, above[0].Offset, &above[0].ShardHeader, false); d.Status != StatusOK {
		t.Fatalf("write at the seal: %v %s", d.Status, d.Detail)
	}
	if o.Len() != 1 {
		t.Fatalf("owner holds %d slots, want 1", o.Len())
	}
}

// TestOwnerRebuilt: an owner rebuilt from the store (seal + slots) keeps
// refusing what the old one refused.
func TestOwnerRebuilt(t *testing.T) {
	mid := base + RangeNanos/2
	a := encode(t, sid(0, 1), mid, 1)
	b := encode(t, sid(1, 1), mid, 1)
	h := a[2].ShardHeader
	o := NewOwner(ownerCfg(), mid-5, map[uint64]SlotInfo{mid: {ID: h.ID, Index: h.Index, DataCRC: h.DataCRC}})
	if d := o.Write(int64(mid), mid, &b[2].ShardHeader, false); d.Status != StatusConflict {
		t.Fatalf("rebuilt owner accepted a second stripe: %v", d.Status)
	}
	if d := o.Write(int64(mid), mid, &a[2].ShardHeader, false); d.Status != StatusOK || !d.Barrier {
		t.Fatalf("rebuilt owner refused the same shard: %v", d.Status)
	}
	c := encode(t, sid(2, 1), mid-10, 1)
	if d := o.Write(int64(mid), mid-10, &c[2].ShardHeader, false); d.Status != StatusSealed {
		t.Fatalf("rebuilt owner forgot its seal: %v", d.Status)
	}
}

func ms2u(n int64) uint64 { return uint64(n * ms) }

// TestOwnerGrid: on a gridded topic a write or a repair off the grid is
// BAD_REQUEST, saying why, and takes no slot; on the grid the usual rules
// apply; without a grid any offset is fine.
func TestOwnerGrid(t *testing.T) {
	const grid = 1024
	on := (base + RangeNanos/2) &^ (grid - 1) // the middle of the range, on the grid
	cases := []struct {
		name   string
		grid   uint64
		off    uint64
		repair bool
		want   Status
	}{
		{name: "on grid", grid: grid, off: on, want: StatusOK},
		{name: "one past the grid", grid: grid, off: on + 1, want: StatusBadRequest},
		{name: "just below the grid", grid: grid, off: on - 1, want: StatusBadRequest},
		{name: "repair on grid", grid: grid, off: on, repair: true, want: StatusOK},
		{name: "repair off grid", grid: grid, off: on + grid/2, repair: true, want: StatusBadRequest},
		{name: "no grid", grid: 0, off: on + 1, want: StatusOK},
		{name: "grid 1 is none", grid: 1, off: on + 1, want: StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ownerCfg()
			cfg.Grid = tc.grid
			o := NewOwner(cfg, 0, nil)
			s := encode(t, sid(0, 1), tc.off, 1)[0]
			var d WriteDecision
			if tc.repair {
				d = o.RepairWrite(int64(on), tc.off, &s.ShardHeader, false)
			} else {
				d = o.Write(int64(on), tc.off, &s.ShardHeader, false)
			}
			if d.Status != tc.want {
				t.Fatalf("status %v (%s), want %v", d.Status, d.Detail, tc.want)
			}
			if d.Status == StatusBadRequest && (!strings.Contains(d.Detail, "grid") || o.Occupied(tc.off)) {
				t.Fatalf("refusal %q does not name the grid, or the slot was taken", d.Detail)
			}
		})
	}
}

func TestRangeMatchesAcceptPlanAlign(t *testing.T) {
	if RangeNanos != quorum.RangeAlign {
		t.Fatalf("core.RangeNanos %d and quorum.RangeAlign %d differ: accept plans would switch windows inside an owner range", RangeNanos, quorum.RangeAlign)
	}
}
