package stripe

import (
	"bytes"
	"errors"
	"fmt"
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

func TestBatchRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n < 50; n += 7 {
		recs := testRecords(r, n)
		b, err := AppendBatch(nil, recs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(recs) {
			t.Fatalf("got %d records, want %d", len(got), len(recs))
		}
		for i := range got {
			if !bytes.Equal(got[i].Key, recs[i].Key) || !bytes.Equal(got[i].Value, recs[i].Value) || len(got[i].Headers) != len(recs[i].Headers) {
				t.Fatalf("record %d differs", i)
			}
		}
	}
	if _, err := AppendBatch(nil, nil); err == nil {
		t.Fatal("empty batch accepted")
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
	b, _ := AppendBatch(nil, testRecords(rand.New(rand.NewPCG(5, 6)), 5))
	f.Add(b)
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := DecodeBatch(b)
		if err != nil {
			return
		}
		again, err := AppendBatch(nil, recs)
		if err != nil {
			t.Fatalf("decoded batch does not re-encode: %v", err)
		}
		if _, err := DecodeBatch(again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
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
