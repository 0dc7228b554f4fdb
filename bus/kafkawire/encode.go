package kafkawire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxSpecRecords bounds one encoded batch's records (kgo, librdkafka and
// the Java client all cap a batch well below it).
const maxSpecRecords = 1 << 20

// BatchSpec is a batch for AppendBatch to encode.
type BatchSpec struct {
	BaseOffset           int64
	PartitionLeaderEpoch int32
	// Compression is the codec; the zero value is none.
	Compression Codec
	// LogAppendTime marks the batch's timestamps as the broker's append
	// time, AppendTime (ms), which becomes MaxTimestamp; the records keep
	// their own Timestamp deltas, as Kafka does.
	LogAppendTime bool
	AppendTime    int64
	Transactional bool
	Control       bool
	// ProducerID, ProducerEpoch and BaseSequence are the idempotent or
	// transactional producer's, all -1 for none. The zero value is not
	// none: 0 is a real producer id.
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	// Records: at least one, with offset deltas from 0 up, increasing
	// (gaps allowed, as in a compacted log). AppendBatch reads each
	// record's OffsetDelta, Timestamp (absolute, ms), Key, Value and
	// Headers; it derives TimestampDelta.
	Records []Record
}

// AppendBatch appends s encoded as one record batch v2 to dst, computing
// Length, CRC32C, LastOffsetDelta, FirstTimestamp (the first record's),
// MaxTimestamp (the largest, or AppendTime) and NumRecords. On error
// (ErrBadSpec: no records, deltas not increasing, a codec it does not know,
// a batch past 2 GiB) dst is returned unchanged.
func AppendBatch(dst []byte, s BatchSpec) ([]byte, error) {
	if err := checkSpec(&s); err != nil {
		return dst, err
	}
	first, maxTS := timestamps(&s)
	records, err := encodeRecords(s.Records, first)
	if err != nil {
		return dst, err
	}
	if s.Compression != NoCompression {
		if records, err = compress(s.Compression, records); err != nil {
			return dst, err
		}
	}
	if len(records) > math.MaxInt32-batchFixedLen {
		return dst, fmt.Errorf("%w: %d bytes of records", ErrBadSpec, len(records))
	}
	rb := batchHeader(&s, first, maxTS)
	rb.Length = int32(batchFixedLen + len(records))
	rb.Records = records
	start := len(dst)
	dst = rb.AppendTo(dst)
	sum := crc32.Checksum(dst[start+crcFrom:], castagnoli)
	binary.BigEndian.PutUint32(dst[start+crcAt:], sum)
	return dst, nil
}

// checkSpec refuses what AppendBatch cannot encode.
func checkSpec(s *BatchSpec) error {
	n := len(s.Records)
	switch {
	case n == 0 || n > maxSpecRecords:
		return fmt.Errorf("%w: %d records", ErrBadSpec, n)
	case s.Compression < NoCompression || s.Compression > Zstd:
		return fmt.Errorf("%w: codec %d", ErrBadSpec, s.Compression)
	case s.Records[0].OffsetDelta < 0:
		return fmt.Errorf("%w: first offset delta %d", ErrBadSpec, s.Records[0].OffsetDelta)
	}
	for i := 1; i < n; i++ {
		if s.Records[i].OffsetDelta <= s.Records[i-1].OffsetDelta {
			return fmt.Errorf("%w: offset delta %d after %d", ErrBadSpec, s.Records[i].OffsetDelta, s.Records[i-1].OffsetDelta)
		}
	}
	return nil
}

// timestamps returns the batch's FirstTimestamp and MaxTimestamp.
func timestamps(s *BatchSpec) (first, maxTS int64) {
	first, maxTS = s.Records[0].Timestamp, s.Records[0].Timestamp
	for i := range s.Records {
		maxTS = max(maxTS, s.Records[i].Timestamp)
	}
	if s.LogAppendTime {
		maxTS = s.AppendTime
	}
	return first, maxTS
}

// encodeRecords encodes the records with kmsg, each with its Length.
func encodeRecords(recs []Record, first int64) ([]byte, error) {
	var out []byte
	for i := range recs {
		r := &recs[i]
		if len(r.Key) > math.MaxInt32 || len(r.Value) > math.MaxInt32 || len(r.Headers) > math.MaxInt32 {
			return nil, fmt.Errorf("%w: record %d too large", ErrBadSpec, i)
		}
		delta := r.Timestamp - first
		kr := kmsg.Record{Length: int32(recordBodyLen(r, delta)), TimestampDelta64: delta,
			OffsetDelta: r.OffsetDelta, Key: r.Key, Value: r.Value, Headers: r.Headers}
		if out = kr.AppendTo(out); len(out) > math.MaxInt32-batchFixedLen {
			return nil, fmt.Errorf("%w: records past 2 GiB", ErrBadSpec)
		}
	}
	return out, nil
}

// batchHeader fills a kmsg batch header from s, without Length, CRC and
// records.
func batchHeader(s *BatchSpec, first, maxTS int64) kmsg.RecordBatch {
	rb := kmsg.RecordBatch{
		FirstOffset:          s.BaseOffset,
		PartitionLeaderEpoch: s.PartitionLeaderEpoch,
		Magic:                2,
		Attributes:           int16(s.Compression),
		LastOffsetDelta:      s.Records[len(s.Records)-1].OffsetDelta,
		FirstTimestamp:       first,
		MaxTimestamp:         maxTS,
		ProducerID:           s.ProducerID,
		ProducerEpoch:        s.ProducerEpoch,
		FirstSequence:        s.BaseSequence,
		NumRecords:           int32(len(s.Records)),
	}
	for _, f := range []struct {
		on   bool
		flag int16
	}{{s.LogAppendTime, logAppendTimeFlag}, {s.Transactional, transactionalFlag}, {s.Control, controlFlag}} {
		if f.on {
			rb.Attributes |= f.flag
		}
	}
	return rb
}
