package core

import (
	"sort"

	"github.com/raidq/raidq/stripe"
)

// Per-record dedupe of record-numbered stripes (stripe.Numbered): a Kafka
// gateway may write several batches of one producer as one stripe, whose
// record i is that producer's sequence Seq+i, and a retry of one of those
// batches (through another gateway) as a stripe of its own. Dropping
// repeated stripe ids would deliver the retry's records twice, so for
// these producers the reader remembers which sequences it delivered and
// drops each one it has seen, record by record.

// Bounds of the sequence memory.
const (
	// maxSeqSpans is how many disjoint spans of sequences are kept per
	// producer (a producer's sequences are contiguous but for batches
	// that failed for good); past it the lowest go.
	maxSeqSpans = 64
	// maxSeqProducers bounds the producers remembered at once; the
	// least recently seen go first.
	maxSeqProducers = 1 << 16
	// seqWrap: a sequence this far below the highest seen means the
	// producer's int32 sequence wrapped to 0: its memory starts over.
	seqWrap = 1 << 30
)

// seqSpan is the half-open span [lo, hi) of delivered sequences.
type seqSpan struct{ lo, hi uint64 }

// seqMemory is what one record-numbered producer delivered.
type seqMemory struct {
	spans []seqSpan // sorted, disjoint, not adjacent
	last  uint64    // offset of the stripe that last added to it (horizon)
}

// fresh marks which of n records from sequence lo were not delivered
// before (nil: all fresh), then remembers them all as delivered at off.
func (m *seqMemory) fresh(lo uint64, n int, off uint64) []bool {
	hi := lo + uint64(n)
	if len(m.spans) > 0 && m.spans[len(m.spans)-1].hi > hi+seqWrap {
		m.spans = m.spans[:0] // wrapped: the old numbers are a past life
	}
	var keep []bool
	for _, s := range m.spans {
		if s.hi <= lo || s.lo >= hi {
			continue
		}
		if keep == nil {
			keep = make([]bool, n)
			for i := range keep {
				keep[i] = true
			}
		}
		for q := max(s.lo, lo); q < min(s.hi, hi); q++ {
			keep[q-lo] = false
		}
	}
	m.add(seqSpan{lo, hi})
	m.last = max(m.last, off)
	return keep
}

// add merges s into the spans, dropping the lowest beyond maxSeqSpans.
func (m *seqMemory) add(s seqSpan) {
	spans := append(m.spans, s)
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	out := spans[:1]
	for _, x := range spans[1:] {
		if top := &out[len(out)-1]; x.lo <= top.hi {
			top.hi = max(top.hi, x.hi)
			continue
		}
		out = append(out, x)
	}
	if len(out) > maxSeqSpans {
		out = append(out[:0], out[len(out)-maxSeqSpans:]...)
	}
	m.spans = out
}

// freshRecords is the reader's per-record filter for a stripe id at off
// with n records: nil when every record is to be delivered (any stripe
// not record-numbered), else which are.
func (r *Reader) freshRecords(id stripe.ID, off uint64, n int) []bool {
	if !stripe.Numbered(id) {
		return nil
	}
	if r.seqs == nil {
		r.seqs = make(map[stripe.ProducerID]*seqMemory)
	}
	m := r.seqs[id.Producer]
	if m == nil {
		if len(r.seqs) >= maxSeqProducers {
			r.forgetOldestSeqs()
		}
		m = &seqMemory{}
		r.seqs[id.Producer] = m
	}
	return m.fresh(id.Seq, n, off)
}

// pruneSeqs forgets producers that wrote nothing within the dedupe horizon.
func (r *Reader) pruneSeqs() {
	for p, m := range r.seqs {
		if m.last+r.cfg.DedupeHorizon < r.pos.Offset {
			delete(r.seqs, p)
		}
	}
}

func (r *Reader) forgetOldestSeqs() {
	var oldest stripe.ProducerID
	first := true
	var at uint64
	for p, m := range r.seqs {
		if first || m.last < at {
			oldest, at, first = p, m.last, false
		}
	}
	delete(r.seqs, oldest)
}
