package kafkawire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Records are parsed here rather than with kmsg.Record.ReadFrom, which
// allocates a record's header array by its claimed count before anything
// can refuse it (a run of zero bytes claims a header per two bytes) and
// does not report how many bytes it consumed; this parser applies the
// limits before allocating and checks that each record fills exactly its
// Length, as Kafka does. Encoding uses kmsg.Record.AppendTo.

// errRecordShort is the sticky failure of a record field read past its
// record's end.
var errRecordShort = errors.New("field past the record's end")

// parseRecords parses the n records of data, a batch's decompressed
// records, into Records with timestamps resolved against batch.
func parseRecords(data []byte, n int, batch *Batch, bud *budget) ([]Record, error) {
	if n > len(data)/minRecordLen {
		return nil, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrInvalidRecord, n, len(data))
	}
	if n == 0 && len(data) == 0 {
		return nil, nil
	}
	recs := make([]Record, n)
	for i := range recs {
		var err error
		if data, err = parseRecord(data, &recs[i], bud); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		recs[i].Timestamp = batch.FirstTimestamp + recs[i].TimestampDelta
		if batch.TimestampType == 1 {
			recs[i].Timestamp = batch.MaxTimestamp
		}
	}
	if len(data) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the batch's %d records", ErrInvalidRecord, len(data), n)
	}
	bud.records -= n
	return recs, nil
}

// parseRecord parses the record at the start of data into rec and returns
// the bytes after it.
func parseRecord(data []byte, rec *Record, bud *budget) ([]byte, error) {
	lr := recReader{b: data}
	length := lr.varint()
	if lr.err != nil || length < 0 || int(length) > len(lr.b) {
		return nil, fmt.Errorf("%w: record length %d of %d bytes left", ErrInvalidRecord, length, len(lr.b))
	}
	r := recReader{b: lr.b[:length]}
	r.span(1) // attributes: unused by record batch v2
	rec.TimestampDelta = r.varlong()
	rec.OffsetDelta = r.varint()
	rec.Key = r.bytes(bud.lim.MaxKeyBytes)
	rec.Value = r.bytes(bud.lim.MaxValueBytes)
	rec.Headers = r.headers(bud)
	switch {
	case r.err != nil && errors.Is(r.err, ErrTooLarge):
		return nil, r.err
	case r.err != nil:
		return nil, fmt.Errorf("%w: %w", ErrInvalidRecord, r.err)
	case len(r.b) != 0:
		return nil, fmt.Errorf("%w: %d bytes after the record's fields", ErrInvalidRecord, len(r.b))
	}
	return lr.b[length:], nil
}

// recReader reads a record's varint fields with a sticky error.
type recReader struct {
	b   []byte
	err error
}

func (r *recReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *recReader) span(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.fail(errRecordShort)
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// varint reads a zigzag varint of at most 32 bits.
func (r *recReader) varint() int32 {
	u, n := binary.Uvarint(r.b)
	if r.err != nil || n <= 0 || u > math.MaxUint32 {
		r.fail(errRecordShort)
		return 0
	}
	r.b = r.b[n:]
	return int32(u>>1) ^ -int32(u&1)
}

// varlong reads a zigzag varint of at most 64 bits.
func (r *recReader) varlong() int64 {
	v, n := binary.Varint(r.b)
	if r.err != nil || n <= 0 {
		r.fail(errRecordShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes reads varint-length bytes, nil for a negative (null) length,
// refusing more than limit.
func (r *recReader) bytes(limit int) []byte {
	n := r.varint()
	switch {
	case n < 0:
		return nil
	case int(n) > limit:
		r.fail(fmt.Errorf("%w: a %d-byte key or value, limit %d", ErrTooLarge, n, limit))
		return nil
	}
	return r.span(int(n))
}

// headers reads a record's header array, within the limits.
func (r *recReader) headers(bud *budget) []Header {
	n := int(r.varint())
	switch {
	case r.err != nil:
		return nil
	case n < 0:
		r.fail(fmt.Errorf("%d headers", n))
		return nil
	case n > bud.lim.MaxHeaders || n > bud.headers:
		r.fail(fmt.Errorf("%w: %d headers, limit %d (%d left in the request)", ErrTooLarge, n, bud.lim.MaxHeaders, bud.headers))
		return nil
	case n > len(r.b)/2: // a header is at least two 1-byte lengths
		r.fail(errRecordShort)
		return nil
	case n == 0:
		return nil
	}
	bud.headers -= n
	hs := make([]Header, n)
	for i := range hs {
		key := r.bytes(bud.lim.MaxKeyBytes)
		if key == nil && r.err == nil {
			r.fail(errors.New("null header key"))
		}
		hs[i] = Header{Key: string(key), Value: r.bytes(bud.lim.MaxValueBytes)}
	}
	return hs
}

// varintLen is the encoded size of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return max(1, (bits.Len64(u)+6)/7)
}

// bytesLen is the encoded size of varint-length bytes (null: length -1).
func bytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

// recordBodyLen is the encoded size of a record after its Length field, as
// kmsg.Record.AppendTo writes it.
func recordBodyLen(rec *Record, tsDelta int64) int {
	n := 1 + varintLen(tsDelta) + varintLen(int64(rec.OffsetDelta)) +
		bytesLen(rec.Key) + bytesLen(rec.Value) + varintLen(int64(len(rec.Headers)))
	for i := range rec.Headers {
		h := &rec.Headers[i]
		n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	return n
}
