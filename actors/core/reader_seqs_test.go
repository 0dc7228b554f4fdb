package core

import (
	"testing"

	"github.com/raidq/raidq/stripe"
)

func keepCount(k []bool, n int) int {
	if k == nil {
		return n
	}
	c := 0
	for _, x := range k {
		if x {
			c++
		}
	}
	return c
}

// A merged stripe of sequences 0..9, then a retry of 4..6 alone, then
// 8..12: only the sequences not delivered before are kept.
func TestSeqMemoryDropsDeliveredSequences(t *testing.T) {
	var m seqMemory
	if k := m.fresh(0, 10, 1000); keepCount(k, 10) != 10 {
		t.Fatalf("first stripe: kept %d of 10", keepCount(k, 10))
	}
	if k := m.fresh(4, 3, 2000); keepCount(k, 3) != 0 {
		t.Fatalf("a retry of delivered sequences kept %d", keepCount(k, 3))
	}
	k := m.fresh(8, 5, 3000)
	if keepCount(k, 5) != 3 || k[0] || k[1] || !k[2] || !k[4] {
		t.Fatalf("8..12 after 0..9: keep %v, want only 10, 11, 12", k)
	}
	if len(m.spans) != 1 || m.spans[0] != (seqSpan{0, 13}) {
		t.Fatalf("spans %v, want one [0,13)", m.spans)
	}
}

// Kafka sequences wrap at 2^31: numbers far below the highest start a
// new memory instead of being taken for delivered.
func TestSeqMemoryWrap(t *testing.T) {
	var m seqMemory
	m.fresh(1<<31-5, 5, 1)
	if k := m.fresh(0, 4, 2); keepCount(k, 4) != 4 {
		t.Fatalf("after the wrap kept %d of 4", keepCount(k, 4))
	}
}

// Gaps (batches that failed for good) stay bounded.
func TestSeqMemoryBounded(t *testing.T) {
	var m seqMemory
	for i := uint64(0); i < 3*maxSeqSpans; i++ {
		m.fresh(i*10, 5, i)
	}
	if len(m.spans) != maxSeqSpans {
		t.Fatalf("%d spans kept, want %d", len(m.spans), maxSeqSpans)
	}
}

// The reader filters only record-numbered stripes.
func TestFreshRecordsOnlyNumbered(t *testing.T) {
	r := NewReader(ReaderConfig{DedupeHorizon: 1 << 40}, Position{})
	native := stripe.ID{Producer: stripe.ProducerID{1, 2, 3}, Seq: 1}
	if r.freshRecords(native, 10, 4) != nil || r.freshRecords(native, 20, 4) != nil {
		t.Fatal("a native stripe was filtered by sequence")
	}
	var kp stripe.ProducerID
	copy(kp[:], stripe.NumberedPrefix)
	k := stripe.ID{Producer: kp, Seq: 100}
	r.freshRecords(k, 10, 4)
	if keepCount(r.freshRecords(stripe.ID{Producer: kp, Seq: 102}, 20, 1), 1) != 0 {
		t.Fatal("a record-numbered retry was delivered again")
	}
}
