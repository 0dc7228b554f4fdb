package stripe

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestEncodeRecordsSameAsAppendThenEncode: EncodeRecords gives the same
// payload and shards, byte for byte, as AppendBatch followed by Encode,
// and BatchSize is AppendBatch's exact length, in both batch formats.
func TestEncodeRecordsSameAsAppendThenEncode(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := range 200 {
		recs := testRecords(r, 1+r.IntN(40))
		if trial%3 == 0 { // v2
			recs = timedRecords(r, len(recs))
		}
		if trial%7 == 0 { // a long value: multi-byte varints
			recs[0].Value = bytes.Repeat([]byte{byte(trial)}, 20000+r.IntN(3000))
		}
		want, err := AppendBatch(nil, recs)
		if err != nil {
			t.Fatal(err)
		}
		if got := BatchSize(recs); got != len(want) {
			t.Fatalf("BatchSize %d, AppendBatch %d bytes", got, len(want))
		}
		n, k := 4+r.IntN(5), 2+r.IntN(2)
		id := ID{Seq: uint64(trial)}
		wantShards, err := Encode(id, 99, n, k, want)
		if err != nil {
			t.Fatal(err)
		}
		shards, payload, err := EncodeRecords(id, 99, n, k, recs)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(payload, want) {
			t.Fatalf("trial %d: payload differs", trial)
		}
		for i := range shards {
			if !bytes.Equal(shards[i].Marshal(), wantShards[i].Marshal()) {
				t.Fatalf("trial %d: shard %d differs", trial, i)
			}
		}
	}
	if _, _, err := EncodeRecords(ID{}, 1, 6, 4, nil); err == nil {
		t.Fatal("no records: want an error")
	}
}
