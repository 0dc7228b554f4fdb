package stripe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Limits on a micro-batch. A batch is the unit the producer encodes into one
// stripe; the node never looks inside it.
const (
	MaxBatchBytes   = 4 << 20 // hard cap on an encoded batch (default producer batch is 256 KiB)
	MaxRecords      = 1 << 16 // records per batch
	MaxHeaders      = 64      // headers per record
	batchVersion    = 1
	maxFieldBytes   = MaxBatchBytes
	batchHeaderSize = 1
)

// ErrCorruptBatch is wrapped by every batch decoding error.
var ErrCorruptBatch = errors.New("corrupt batch")

// Header is one record header (name, value); names may repeat.
type Header struct {
	Name  string
	Value []byte
}

// Record is one message: key, value, headers.
type Record struct {
	Key     []byte
	Value   []byte
	Headers []Header
}

// Size is the record's encoded size upper bound, for batch accounting.
func (r *Record) Size() int {
	n := 3*binary.MaxVarintLen32 + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += 2*binary.MaxVarintLen32 + len(h.Name) + len(h.Value)
	}
	return n
}

// AppendBatch encodes records as one batch payload appended to dst.
// Format v1: version byte, uvarint count, then per record uvarint-length
// prefixed key and value, uvarint header count, and per header uvarint-length
// prefixed name and value.
func AppendBatch(dst []byte, recs []Record) ([]byte, error) {
	if len(recs) == 0 || len(recs) > MaxRecords {
		return dst, fmt.Errorf("batch of %d records: must hold 1..%d", len(recs), MaxRecords)
	}
	start := len(dst)
	dst = append(dst, batchVersion)
	dst = binary.AppendUvarint(dst, uint64(len(recs)))
	for i := range recs {
		r := &recs[i]
		if len(r.Headers) > MaxHeaders {
			return dst[:start], fmt.Errorf("record %d has %d headers, limit %d", i, len(r.Headers), MaxHeaders)
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
		return dst[:start], fmt.Errorf("batch of %d bytes exceeds limit %d", len(dst)-start, MaxBatchBytes)
	}
	return dst, nil
}

// BatchSize is the exact length AppendBatch gives recs (no limits checked).
func BatchSize(recs []Record) int {
	n := 1 + uvarintLen(uint64(len(recs)))
	for i := range recs {
		r := &recs[i]
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

// DecodeBatch decodes a batch payload. It never panics on bad input; values
// alias b.
func DecodeBatch(b []byte) ([]Record, error) {
	if len(b) < batchHeaderSize {
		return nil, fmt.Errorf("%w: empty", ErrCorruptBatch)
	}
	if b[0] != batchVersion {
		return nil, fmt.Errorf("%w: unknown batch version %d", ErrCorruptBatch, b[0])
	}
	d := decoder{b: b[1:]}
	count := d.uvarint(MaxRecords)
	if d.err == nil && count == 0 {
		d.fail("zero records")
	}
	var recs []Record
	if d.err == nil {
		recs = make([]Record, 0, min(count, uint64(len(d.b))))
	}
	for i := uint64(0); d.err == nil && i < count; i++ {
		var r Record
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
