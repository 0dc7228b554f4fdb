package core

import (
	"testing"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestReaderSkipsEmptyTime: a reader an hour behind probes and jumps to the
// first occupied offset any heard node reports, never past one, and never
// closer to now than SkipBehind.
func TestReaderSkipsEmptyTime(t *testing.T) {
	p := quorum.Default()
	cfg := DefaultReaderConfig(p)
	start := uint64(1_000) * RangeNanos
	now := int64(start + 3600*RangeNanos)
	r := NewReader(cfg, Position{Offset: start})
	sc, ok := r.Next(now)
	if !ok || !sc.Probe || sc.ProbeLimit != uint64(now)-uint64(p.ReadDelay)-cfg.SkipBehind {
		t.Fatalf("far behind: want a probing scan, got %+v", sc)
	}
	data := start + 1800*RangeNanos + 7
	shards, _ := stripe.Encode(stripe.ID{Seq: 1}, data, 6, 4, mustBatch(t))
	res := make([]NodeResult, 6)
	for i := range res {
		res[i] = NodeResult{Node: i, Heard: i != 5, Closed: sc.To, After: data + uint64(i), Clock: now} // node 5 unheard: still < W
	}
	r.Apply(now, sc, res)
	if r.Frontier() != data {
		t.Fatalf("frontier %d, want the first occupied offset %d", r.Frontier(), data)
	}
	sc, _ = r.Next(now)
	entries := make([]NodeResult, 6)
	for i := range entries {
		entries[i] = NodeResult{Node: i, Heard: true, Closed: sc.To, Entries: []Entry{{Offset: data, Shard: shards[i].Marshal()}}}
	}
	out := r.Apply(now, sc, entries)
	if len(out.Deliveries) != 1 {
		t.Fatalf("after the skip the stripe must be delivered, got %+v", out)
	}
	// Nothing anywhere: jump to the probe limit and no further.
	r2 := NewReader(cfg, Position{Offset: start})
	sc, _ = r2.Next(now)
	for i := range res {
		res[i] = NodeResult{Node: i, Heard: true, Closed: sc.To, Clock: now}
	}
	r2.Apply(now, sc, res)
	if r2.Frontier() != sc.ProbeLimit {
		t.Fatalf("empty partition: frontier %d, want the probe limit %d", r2.Frontier(), sc.ProbeLimit)
	}
	if sc, _ := r2.Next(now); sc.Probe {
		t.Fatal("within SkipBehind of now-D the reader must scan, not probe")
	}
}

func mustBatch(t *testing.T) []byte {
	b, err := stripe.AppendBatch(nil, []stripe.Record{{Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReaderSkipUsesNodeClocks: a reader whose clock is a minute fast
// probes, but the skip stops SkipBehind below the heard nodes' clocks
// minus the accept window (finding 3: with the reader's clock it jumped
// over offsets the nodes still accepted). A heard node that reports no
// clock prevents the skip.
func TestReaderSkipUsesNodeClocks(t *testing.T) {
	p := quorum.Default()
	cfg := DefaultReaderConfig(p)
	start := uint64(1_000) * RangeNanos
	nodeNow := int64(start + 3600*RangeNanos)
	readerNow := nodeNow + 60_000_000_000
	r := NewReader(cfg, Position{Offset: start})
	sc, ok := r.Next(readerNow)
	if !ok || !sc.Probe {
		t.Fatalf("want a probing scan, got %+v", sc)
	}
	res := make([]NodeResult, 6)
	for i := range res {
		res[i] = NodeResult{Node: i, Heard: true, Closed: sc.To, Clock: nodeNow + int64(i)*1_000_000}
	}
	r.Apply(readerNow, sc, res)
	want := uint64(nodeNow) - uint64(p.AcceptWindow) - cfg.SkipBehind
	if r.Frontier() != want {
		t.Fatalf("frontier %d, want %d (slowest heard node clock - A - SkipBehind)", r.Frontier(), want)
	}
	r2 := NewReader(cfg, Position{Offset: start})
	sc, _ = r2.Next(readerNow)
	res[3].Clock = 0
	r2.Apply(readerNow, sc, res)
	if r2.Frontier() != sc.To {
		t.Fatalf("a heard node without a clock: frontier %d, want no skip (%d)", r2.Frontier(), sc.To)
	}
}
