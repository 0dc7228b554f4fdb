package stripe

import (
	"testing"
)

// The bench's batch: 16 records of 1 KiB (what 16 synchronous publishers
// put in one stripe), from records to the six marshalled shards, as the
// producer does per stripe.
func benchRecords() []Record {
	recs := make([]Record, 16)
	for i := range recs {
		v := make([]byte, 1024)
		for j := range v {
			v[j] = byte(i*131 + j*7)
		}
		recs[i] = Record{Value: v}
	}
	return recs
}

// BenchmarkProducerStripe16x1K: EncodeRecords + six AppendTo, what the
// producer does per stripe.
func BenchmarkProducerStripe16x1K(b *testing.B) {
	recs := benchRecords()
	b.SetBytes(16 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		shards, _, err := EncodeRecords(ID{Seq: 1}, 1, 6, 4, recs)
		if err != nil {
			b.Fatal(err)
		}
		for i := range shards {
			_ = shards[i].AppendTo(make([]byte, 0, shards[i].Size()))
		}
	}
}

// BenchmarkProducerStripe16x1KAppendEncode: the same with AppendBatch
// then Encode (what the producer did before EncodeRecords).
func BenchmarkProducerStripe16x1KAppendEncode(b *testing.B) {
	recs := benchRecords()
	b.SetBytes(16 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		payload, err := AppendBatch(nil, recs)
		if err != nil {
			b.Fatal(err)
		}
		shards, err := Encode(ID{Seq: 1}, 1, 6, 4, payload)
		if err != nil {
			b.Fatal(err)
		}
		for i := range shards {
			_ = shards[i].AppendTo(make([]byte, 0, shards[i].Size()))
		}
	}
}

// BenchmarkNodeParse4K: what a node checks per write, Parse (both CRCs)
// of a 4 KiB shard.
func BenchmarkNodeParse4K(b *testing.B) {
	payload, _ := AppendBatch(nil, benchRecords())
	shards, _ := Encode(ID{Seq: 1}, 1, 6, 4, payload)
	m := shards[0].Marshal()
	b.SetBytes(int64(len(m)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReaderDecode16x1K: decode a stripe from its four data shards
// (no Reed-Solomon work) and split it into records, as a reader does.
func BenchmarkReaderDecode16x1K(b *testing.B) { benchDecodeBatch(b, []int{0, 1, 2, 3}) }

// BenchmarkReaderDecode16x1KTwoLost: the same with two data shards lost.
func BenchmarkReaderDecode16x1KTwoLost(b *testing.B) { benchDecodeBatch(b, []int{0, 2, 4, 5}) }

func benchDecodeBatch(b *testing.B, idx []int) {
	payload, _ := AppendBatch(nil, benchRecords())
	shards, _ := Encode(ID{Seq: 1}, 1, 6, 4, payload)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		in := make([]*Shard, 6)
		for _, i := range idx {
			in[i] = &shards[i]
		}
		p, err := Decode(in)
		if err != nil {
			b.Fatal(err)
		}
		if recs, err := DecodeBatch(p); err != nil || len(recs) != 16 {
			b.Fatal(err, len(recs))
		}
	}
}
