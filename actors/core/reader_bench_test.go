package core

import (
	"testing"

	"github.com/raidq/raidq/stripe"
)

// benchPage builds the scan results of one page: stripes stripes of recs
// records of size bytes each, one per millisecond from base, with the
// shards of nodes present on every node (as a reader's scan of six
// healthy nodes returns them).
func benchPage(b *testing.B, stripes, recs, size int, nodes []int) []NodeResult {
	b.Helper()
	p := params()
	results := make([]NodeResult, p.N)
	for i := range results {
		results[i] = NodeResult{Node: i, Heard: true, Closed: ^uint64(0)}
	}
	val := make([]byte, size)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	for s := range stripes {
		rs := make([]stripe.Record, recs)
		for i := range rs {
			rs[i] = stripe.Record{Value: val}
		}
		payload, err := stripe.AppendBatch(nil, rs)
		if err != nil {
			b.Fatal(err)
		}
		off := base + uint64(s+1)*uint64(ms)
		shards, err := stripe.Encode(sid(0, uint64(s+1)), off, p.N, p.K, payload)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range nodes {
			results[n].Entries = append(results[n].Entries, Entry{Offset: off, Shard: shards[n].Marshal()})
		}
	}
	return results
}

// benchReaderApply applies one scanned page per op to a fresh reader and
// checks every record is delivered: grouping, shard parsing and CRC
// checks, Reed-Solomon (when data shards are missing), batch decoding.
func benchReaderApply(b *testing.B, nodes []int) {
	const stripes, recs, size = 64, 16, 1024
	results := benchPage(b, stripes, recs, size, nodes)
	now := startNow() + int64(RangeNanos)
	b.SetBytes(stripes * recs * size)
	b.ReportAllocs()
	for b.Loop() {
		r := newTestReader()
		sc, ok := r.Next(now)
		if !ok {
			b.Fatal("no scan")
		}
		out := r.Apply(now, sc, results)
		if len(out.Deliveries) != stripes*recs {
			b.Fatalf("delivered %d of %d (%+v)", len(out.Deliveries), stripes*recs, out)
		}
	}
}

// BenchmarkReaderApplyPage: a page of 64 stripes (16 x 1 KiB records
// each) from six healthy nodes: no Reed-Solomon work.
func BenchmarkReaderApplyPage(b *testing.B) { benchReaderApply(b, []int{0, 1, 2, 3, 4, 5}) }

// BenchmarkReaderApplyPageTwoDown: the same page with nodes 1 and 3 (two
// data shards) missing: every stripe is reconstructed.
func BenchmarkReaderApplyPageTwoDown(b *testing.B) { benchReaderApply(b, []int{0, 2, 4, 5}) }
