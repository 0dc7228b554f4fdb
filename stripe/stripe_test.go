package stripe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func testRecords(r *rand.Rand, n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i].Key = []byte(fmt.Sprintf("k%d", r.IntN(100)))
		recs[i].Value = make([]byte, r.IntN(300))
		for j := range recs[i].Value {
			recs[i].Value[j] = byte(r.Uint32())
		}
		if i%3 == 0 {
			recs[i].Headers = []Header{{Name: "h", Value: []byte("v")}}
		}
	}
	return recs
}

// timedRecords is testRecords with Kafka-like times: close to a base,
// not in order, and some records without one.
func timedRecords(r *rand.Rand, n int) []Record {
	recs := testRecords(r, n)
	base := int64(1_700_000_000_000_000_000) + r.Int64N(1e15)
	for i := range recs {
		if i%5 != 4 {
			recs[i].Time = base + r.Int64N(2e9) - 1e9
		}
	}
	return recs
}

// sameRecords fails the test unless got and want hold the same records
// (nil and empty fields alike).
func sameRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := &got[i], &want[i]
		if !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || g.Time != w.Time || len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d differs: %+v, want %+v", i, *g, *w)
		}
		for j := range g.Headers {
			if g.Headers[j].Name != w.Headers[j].Name || !bytes.Equal(g.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d differs", i, j)
			}
		}
	}
}

func TestBatchRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n < 50; n += 7 {
		for _, recs := range [][]Record{testRecords(r, n), timedRecords(r, n)} {
			b, err := AppendBatch(nil, recs)
			if err != nil {
				t.Fatal(err)
			}
			if _, timed := baseTime(recs); timed != (b[0] == 2) {
				t.Fatalf("version %d for a batch with times: %v", b[0], timed)
			}
			got, err := DecodeBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, got, recs)
		}
	}
	if _, err := AppendBatch(nil, nil); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("empty batch: %v, want %v", err, ErrInvalidBatch)
	}
}

// TestBatchV1Unchanged: a batch without times is v1, byte for byte as
// before v2 existed.
func TestBatchV1Unchanged(t *testing.T) {
	recs := []Record{{Key: []byte("k"), Value: []byte("v1"), Headers: []Header{{Name: "h", Value: []byte("x")}}}, {Value: []byte("v2")}}
	want := []byte{1, 2, 1, 'k', 2, 'v', '1', 1, 1, 'h', 1, 'x', 0, 2, 'v', '2', 0}
	got, err := AppendBatch(nil, recs)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("v1 batch % x, %v; want % x", got, err, want)
	}
}

// TestBatchV2Format pins v2: base time after the count, then per record
// a time mark (0: none, else zigzag(Time - base) + 1) before its fields.
func TestBatchV2Format(t *testing.T) {
	recs := []Record{{Value: []byte("a"), Time: 1000}, {Value: []byte("b")}, {Value: []byte("c"), Time: 999}, {Value: []byte("d"), Time: 1001}}
	want := []byte{2, 4, 0xe8, 0x07, // version, count, base 1000
		1, 0, 1, 'a', 0, // mark zigzag(0)+1
		0, 0, 1, 'b', 0, // no time
		2, 0, 1, 'c', 0, // zigzag(-1)+1
		3, 0, 1, 'd', 0} // zigzag(1)+1
	got, err := AppendBatch(nil, recs)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("v2 batch % x, %v; want % x", got, err, want)
	}
	if n := BatchSize(recs); n != len(want) {
		t.Fatalf("BatchSize %d, want %d", n, len(want))
	}
	back, err := DecodeBatch(got)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, back, recs)
}

// TestBatchTimeLimits: the extremes of Time round-trip; a negative Time
// is refused, and marks or bases no valid batch has do not decode.
func TestBatchTimeLimits(t *testing.T) {
	for _, times := range [][2]int64{{1, math.MaxInt64}, {math.MaxInt64, 1}, {math.MaxInt64, 0}, {1, 1}} {
		recs := []Record{{Time: times[0]}, {Time: times[1]}}
		b, err := AppendBatch(nil, recs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeBatch(b)
		if err != nil {
			t.Fatalf("times %v: %v", times, err)
		}
		sameRecords(t, got, recs)
		if n := BatchSize(recs); n != len(b) {
			t.Fatalf("times %v: BatchSize %d, encoded %d", times, n, len(b))
		}
		for i := range recs {
			if got := BatchSize(recs[i:i+1]) - 2; got > recs[i].Size() { // less the version and count, not the base
				t.Fatalf("record %d: %d bytes, Size %d", i, got, recs[i].Size())
			}
		}
	}
	neg := []Record{{Value: []byte("x")}, {Time: -1}}
	if _, err := AppendBatch(nil, neg); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("negative time: %v, want %v", err, ErrInvalidBatch)
	}
	if err := CheckBatch(neg); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("CheckBatch of a negative time: %v", err)
	}
	if err := CheckRecord(&neg[1]); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("CheckRecord of a negative time: %v", err)
	}
	bad := map[string][]byte{
		"zero base":        {2, 1, 0, 1, 0, 0, 0},
		"base over int64":  append(append([]byte{2, 1}, binary.AppendUvarint(nil, math.MaxInt64+1)...), 1, 0, 0, 0),
		"time over int64":  append(append([]byte{2, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, binary.AppendUvarint(nil, 3)...), 0, 0, 0),
		"time not after 0": {2, 1, 1, 2, 0, 0, 0}, // base 1, delta -1
		"truncated mark":   {2, 1, 1, 0x80},
	}
	for name, b := range bad {
		if _, err := DecodeBatch(b); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: %v, want %v", name, err, ErrCorruptBatch)
		}
	}
}

// TestSizeBoundsRecord: Size bounds a record's share of any batch, with
// or without a time mark, and CheckBatch refuses what AppendBatch does.
func TestSizeBoundsRecord(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for range 50 {
		recs := timedRecords(r, 1+r.IntN(30))
		bound := 0
		for i := range recs {
			bound += recs[i].Size()
		}
		if n := BatchSize(recs); n > bound+1+binary.MaxVarintLen32+binary.MaxVarintLen64 { // version, count, base
			t.Fatalf("batch of %d bytes, records' Size %d", n, bound)
		}
	}
	many := make([]Record, MaxRecords+1)
	if _, err := AppendBatch(nil, many); !errors.Is(err, ErrInvalidBatch) || !errors.Is(CheckBatch(many), ErrInvalidBatch) {
		t.Fatalf("too many records: %v, %v", err, CheckBatch(many))
	}
	heavy := []Record{{Headers: make([]Header, MaxHeaders+1)}}
	if _, err := AppendBatch(nil, heavy); !errors.Is(err, ErrInvalidBatch) || !errors.Is(CheckRecord(&heavy[0]), ErrInvalidBatch) {
		t.Fatalf("too many headers: %v, %v", err, CheckRecord(&heavy[0]))
	}
	big := []Record{{Value: make([]byte, MaxBatchBytes)}}
	if err := CheckRecord(&big[0]); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("a record over the batch limit: %v", err)
	}
}

func TestEncodeDecodeEveryLossPattern(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	payload, _ := AppendBatch(nil, testRecords(r, 20))
	id := ID{Seq: 7}
	id.Producer[0] = 9
	const n, k = 6, 4
	shards, err := Encode(id, 12345, n, k, payload)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		b := s.Marshal()
		p, err := Parse(b)
		if err != nil {
			t.Fatalf("parse own shard: %v", err)
		}
		if p.ShardHeader != s.ShardHeader {
			t.Fatalf("header round trip: %+v vs %+v", p.ShardHeader, s.ShardHeader)
		}
	}
	for mask := 0; mask < 1<<n; mask++ {
		in := make([]*Shard, n)
		have := 0
		for i := 0; i < n; i++ {
			if mask&(1<<i) != 0 {
				in[i] = &shards[i]
				have++
			}
		}
		got, err := Decode(in)
		if have < k {
			if !errors.Is(err, ErrTooFewShards) {
				t.Fatalf("mask %b: want ErrTooFewShards, got %v", mask, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("mask %b: decode failed: %v", mask, err)
		}
	}
	// Decoding must not have mutated the shards (repair relies on that).
	for i := range shards {
		if CRC(shards[i].Data) != shards[i].DataCRC {
			t.Fatalf("shard %d mutated by decode", i)
		}
	}
}

func TestParseRejectsCorruption(t *testing.T) {
	shards, _ := Encode(ID{Seq: 1}, 1, 6, 4, []byte("hello, raidq"))
	b := shards[2].Marshal()
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := Parse(c); !errors.Is(err, ErrCorruptShard) {
			t.Fatalf("flip at byte %d not detected: %v", i, err)
		}
	}
	if _, err := Parse(b[:len(b)-1]); err == nil {
		t.Fatal("truncated shard accepted")
	}
}

func TestDecodeRejectsMixedStripes(t *testing.T) {
	a, _ := Encode(ID{Seq: 1}, 1, 6, 4, []byte("stripe a payload"))
	b, _ := Encode(ID{Seq: 2}, 1, 6, 4, []byte("stripe b payload"))
	if _, err := Decode([]*Shard{&a[0], &b[1], &a[2], &a[3]}); !errors.Is(err, ErrCorruptShard) {
		t.Fatalf("mixed stripes: %v", err)
	}
}

func TestRebuild(t *testing.T) {
	shards, _ := Encode(ID{Seq: 1}, 99, 6, 4, bytes.Repeat([]byte("x"), 1001))
	got, err := Rebuild([]*Shard{nil, &shards[1], nil, &shards[3], &shards[4], &shards[5]})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if !bytes.Equal(got[i].Marshal(), shards[i].Marshal()) {
			t.Fatalf("rebuilt shard %d differs", i)
		}
	}
}

func FuzzParseShard(f *testing.F) {
	shards, _ := Encode(ID{Seq: 1}, 1, 6, 4, []byte("seed payload for the fuzzer"))
	for _, s := range shards {
		f.Add(s.Marshal())
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		if !bytes.Equal(s.Marshal(), b) {
			t.Fatal("parsed shard does not re-marshal to its input")
		}
		_, _ = Decode([]*Shard{&s})
	})
}

func FuzzDecodeBatch(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	b, _ := AppendBatch(nil, testRecords(r, 5))
	f.Add(b)
	b, _ = AppendBatch(nil, timedRecords(r, 5)) // v2
	f.Add(b)
	b, _ = AppendBatch(nil, []Record{{Time: math.MaxInt64}, {Time: 1}, {}})
	f.Add(b)
	f.Add([]byte{1, 0})
	f.Add([]byte{2, 1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := DecodeBatch(b)
		if err != nil {
			return
		}
		again, err := AppendBatch(nil, recs)
		if err != nil {
			t.Fatalf("decoded batch does not re-encode: %v", err)
		}
		if n := BatchSize(recs); n != len(again) {
			t.Fatalf("BatchSize %d, re-encoded %d bytes", n, len(again))
		}
		back, err := DecodeBatch(again)
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		sameRecords(t, back, recs)
	})
}

func BenchmarkEncode256K(b *testing.B) {
	payload := bytes.Repeat([]byte("raidq"), 256<<10/5)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(ID{Seq: 1}, 1, 6, 4, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAllData256K(b *testing.B) { benchDecode(b, []int{0, 1, 2, 3}) }
func BenchmarkDecodeTwoLost256K(b *testing.B) { benchDecode(b, []int{1, 3, 4, 5}) }

func benchDecode(b *testing.B, idx []int) {
	payload := bytes.Repeat([]byte("raidq"), 256<<10/5)
	shards, _ := Encode(ID{Seq: 1}, 1, 6, 4, payload)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		in := make([]*Shard, 6)
		for _, i := range idx {
			in[i] = &shards[i]
		}
		if _, err := Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}
