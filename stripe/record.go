package stripe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Limits on a micro-batch. A batch is the unit the producer encodes into one
// stripe; the node never looks inside it.
const (
	MaxBatchBytes   = 4 << 20 // hard cap on an encoded batch (default producer batch is 256 KiB)
	MaxRecords      = 1 << 16 // records per batch
	MaxHeaders      = 64      // headers per record
	batchVersion    = 1       // no record has a Time
	batchVersionT   = 2       // v1 plus a time per record
	maxFieldBytes   = MaxBatchBytes
	batchHeaderSize = 1
)

var (
	// ErrCorruptBatch is wrapped by every batch decoding error.
	ErrCorruptBatch = errors.New("corrupt batch")
	// ErrInvalidBatch is wrapped by every error of CheckBatch and
	// AppendBatch: records that break a limit of the batch format.
	ErrInvalidBatch = errors.New("invalid batch")
)

// Header is one record header (name, value); names may repeat.
type Header struct {
	Name  string
	Value []byte
}

// Record is one message: key, value, headers, and the record's own time.
type Record struct {
	Key     []byte
	Value   []byte
	Headers []Header
	// Time is the record's own timestamp in unix ns, set by its producer
	// (a Kafka client's CreateTime, say); 0: none. It is not the stripe's
	// offset, which is when the stripe was written. Never negative.
	Time int64
}

// Size is the record's encoded size upper bound, for batch accounting. A
// record without a Time costs one byte more in a batch where another
// record has one (its "no time" mark); the bound covers it, because the
// length prefixes it counts at 5 bytes each take at most 4 within a
// batch's limits.
func (r *Record) Size() int {
	n := 3*binary.MaxVarintLen32 + len(r.Key) + len(r.Value)
	if r.Time != 0 {
		n += binary.MaxVarintLen64
	}
	for _, h := range r.Headers {
		n += 2*binary.MaxVarintLen32 + len(h.Name) + len(h.Value)
	}
	return n
}

// CheckRecord is CheckBatch of r alone: a record that passes it fails no
// batch it joins, but by the batch's record count or size.
func CheckRecord(r *Record) error { return CheckBatch([]Record{*r}) }

// CheckBatch checks what AppendBatch would refuse, without encoding:
// 1..MaxRecords records, each with at most MaxHeaders headers and a Time
// that is not negative, and at most MaxBatchBytes encoded. Errors wrap
// ErrInvalidBatch.
func CheckBatch(recs []Record) error {
	if err := checkRecords(recs); err != nil {
		return err
	}
	if n := BatchSize(recs); n > MaxBatchBytes {
		return fmt.Errorf("%w: batch of %d bytes exceeds limit %d", ErrInvalidBatch, n, MaxBatchBytes)
	}
	return nil
}

// checkRecords is CheckBatch but the size.
func checkRecords(recs []Record) error {
	if len(recs) == 0 || len(recs) > MaxRecords {
		return fmt.Errorf("%w: batch of %d records: must hold 1..%d", ErrInvalidBatch, len(recs), MaxRecords)
	}
	for i := range recs {
		if len(recs[i].Headers) > MaxHeaders {
			return fmt.Errorf("%w: record %d has %d headers, limit %d", ErrInvalidBatch, i, len(recs[i].Headers), MaxHeaders)
		}
		if recs[i].Time < 0 {
			return fmt.Errorf("%w: record %d has a negative time %d", ErrInvalidBatch, i, recs[i].Time)
		}
	}
	return nil
}

// AppendBatch encodes records as one batch payload appended to dst.
//
// Format v1, used when no record has a Time (so every batch written
// before v2 existed, and every batch of a producer whose records carry no
// time, is unchanged): version byte 1, uvarint count, then per record
// uvarint-length prefixed key and value, uvarint header count, and per
// header uvarint-length prefixed name and value.
//
// Format v2, used when any record has a Time: version byte 2, uvarint
// count, uvarint base time (the first non-zero Time of the batch), then
// per record a uvarint time mark followed by the record exactly as in v1.
// The mark is 0 for a record without a Time, else zigzag(Time - base) + 1
// (the zigzag varint delta of encoding/binary.AppendVarint, plus one), so
// a time within a millisecond of the base takes 3 bytes, within a second
// 5. Times are never negative, so the mark fits in 64 bits.
//
// Errors wrap ErrInvalidBatch and leave dst as it was.
func AppendBatch(dst []byte, recs []Record) ([]byte, error) {
	if err := checkRecords(recs); err != nil {
		return dst, err
	}
	base, timed := baseTime(recs)
	start := len(dst)
	if timed {
		dst = append(dst, batchVersionT)
		dst = binary.AppendUvarint(dst, uint64(len(recs)))
		dst = binary.AppendUvarint(dst, uint64(base))
	} else {
		dst = append(dst, batchVersion)
		dst = binary.AppendUvarint(dst, uint64(len(recs)))
	}
	for i := range recs {
		r := &recs[i]
		if timed {
			dst = binary.AppendUvarint(dst, timeMark(r.Time, base))
		}
		dst = appendBytes(dst, r.Key)
		dst = appendBytes(dst, r.Value)
		dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
		for _, h := range r.Headers {
			dst = appendBytes(dst, []byte(h.Name))
			dst = appendBytes(dst, h.Value)
		}
	}
	if len(dst)-start > MaxBatchBytes {
		return dst[:start], fmt.Errorf("%w: batch of %d bytes exceeds limit %d", ErrInvalidBatch, len(dst)-start, MaxBatchBytes)
	}
	return dst, nil
}

// baseTime is a batch's base time, its first non-zero Time, and whether
// it has one (then it is written as v2).
func baseTime(recs []Record) (int64, bool) {
	for i := range recs {
		if recs[i].Time != 0 {
			return recs[i].Time, true
		}
	}
	return 0, false
}

// timeMark is a record's time mark in a v2 batch of base time base.
func timeMark(t, base int64) uint64 {
	if t == 0 {
		return 0
	}
	d := t - base // both >= 0: no overflow
	return uint64(d<<1^d>>63) + 1
}

// markTime inverts timeMark; ok is false for a mark no valid record gives.
func markTime(mark uint64, base int64) (int64, bool) {
	if mark == 0 {
		return 0, true
	}
	z := mark - 1
	d := int64(z>>1) ^ -int64(z&1)
	t := base + d // base > 0, so an overflow wraps to a negative t
	return t, t > 0
}

// BatchSize is the exact length AppendBatch gives recs (no limits checked).
func BatchSize(recs []Record) int {
	n := 1 + uvarintLen(uint64(len(recs)))
	base, timed := baseTime(recs)
	if timed {
		n += uvarintLen(uint64(base))
	}
	for i := range recs {
		r := &recs[i]
		if timed {
			n += uvarintLen(timeMark(r.Time, base))
		}
		n += bytesLen(len(r.Key)) + bytesLen(len(r.Value)) + uvarintLen(uint64(len(r.Headers)))
		for _, h := range r.Headers {
			n += bytesLen(len(h.Name)) + bytesLen(len(h.Value))
		}
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func bytesLen(n int) int { return uvarintLen(uint64(n)) + n }

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// DecodeBatch decodes a batch payload of either format (AppendBatch). It
// never panics on bad input; values alias b.
func DecodeBatch(b []byte) ([]Record, error) {
	if len(b) < batchHeaderSize {
		return nil, fmt.Errorf("%w: empty", ErrCorruptBatch)
	}
	timed := b[0] == batchVersionT
	if b[0] != batchVersion && !timed {
		return nil, fmt.Errorf("%w: unknown batch version %d", ErrCorruptBatch, b[0])
	}
	d := decoder{b: b[1:]}
	count := d.uvarint(MaxRecords)
	if d.err == nil && count == 0 {
		d.fail("zero records")
	}
	var base int64
	if timed {
		if base = int64(d.uvarint(math.MaxInt64)); d.err == nil && base == 0 {
			d.fail("zero base time")
		}
	}
	var recs []Record
	if d.err == nil {
		recs = make([]Record, 0, min(count, uint64(len(d.b))))
	}
	for i := uint64(0); d.err == nil && i < count; i++ {
		var r Record
		if timed {
			r.Time = d.time(base)
		}
		r.Key = d.bytes()
		r.Value = d.bytes()
		nh := d.uvarint(MaxHeaders)
		for j := uint64(0); d.err == nil && j < nh; j++ {
			name := d.bytes()
			r.Headers = append(r.Headers, Header{Name: string(name), Value: d.bytes()})
		}
		recs = append(recs, r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, d.err
	}
	return recs, nil
}

// decoder reads uvarint-prefixed fields and remembers the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorruptBatch, why)
	}
}

func (d *decoder) uvarint(limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	if v > limit {
		d.fail(fmt.Sprintf("count %d over limit %d", v, limit))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint(maxFieldBytes)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("field of %d bytes, %d left", n, len(d.b)))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return v
}

// time reads a v2 record's time mark (markTime).
func (d *decoder) time(base int64) int64 {
	mark := d.uvarint(math.MaxUint64)
	if d.err != nil {
		return 0
	}
	t, ok := markTime(mark, base)
	if !ok {
		d.fail(fmt.Sprintf("time mark %d out of range of base %d", mark, base))
		return 0
	}
	return t
}
