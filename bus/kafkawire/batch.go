package kafkawire

import (
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Codec is a record batch's compression: attributes bits 0-2.
type Codec int8

// The codecs of Kafka's record batch v2.
const (
	NoCompression Codec = 0
	Gzip          Codec = 1
	Snappy        Codec = 2
	LZ4           Codec = 3
	Zstd          Codec = 4
)

func (c Codec) String() string {
	switch c {
	case NoCompression:
		return "none"
	case Gzip:
		return "gzip"
	case Snappy:
		return "snappy"
	case LZ4:
		return "lz4"
	case Zstd:
		return "zstd"
	}
	return fmt.Sprintf("Codec(%d)", int8(c))
}

// Attribute bits of a record batch v2 beyond the codec.
const (
	codecMask         = 0x07
	logAppendTimeFlag = 0x08
	transactionalFlag = 0x10
	controlFlag       = 0x20
)

// Layout of a record batch v2: FirstOffset int64, Length int32, then the
// Length bytes: PartitionLeaderEpoch int32, Magic int8, CRC int32 and the
// CRC-covered rest from Attributes on.
const (
	batchHeadLen  = 12 // FirstOffset, Length: what Length does not count
	batchFixedLen = 49 // the fixed fields Length counts, before the records
	magicAt       = 16 // the magic's offset; the same in message sets v0/v1
	crcAt         = 17
	crcFrom       = 21 // CRC32C covers attributes to the end
	// minRecordLen is the smallest record: a 1-byte length and six 1-byte
	// fields (attributes, timestamp and offset deltas, null key, null
	// value, no headers).
	minRecordLen = 7
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a record header: a string key, a nullable value.
type Header = kmsg.Header

// Record is one record of a batch.
type Record struct {
	// OffsetDelta is the record's offset minus the batch's BaseOffset.
	OffsetDelta int32
	// TimestampDelta is the record's create time minus the batch's
	// FirstTimestamp, in ms. AppendBatch ignores it (it takes Timestamp).
	TimestampDelta int64
	// Timestamp is the record's time in ms since the epoch: FirstTimestamp
	// + TimestampDelta for a CreateTime batch, MaxTimestamp (the broker's
	// append time) for a LogAppendTime one, as Kafka consumers read it.
	Timestamp int64
	// Key and Value are nil when null (distinct from empty).
	Key, Value []byte
	Headers    []Header
}

// Batch is one decoded record batch v2.
type Batch struct {
	BaseOffset           int64
	PartitionLeaderEpoch int32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	// Compression, TimestampType, Transactional and Control are read out of
	// Attributes. TimestampType is 0 for CreateTime, 1 for LogAppendTime.
	Compression   Codec
	TimestampType int8
	Transactional bool
	Control       bool
	// Records alias the decoded input for an uncompressed batch (keys,
	// values and header values), a buffer of their own otherwise.
	Records []Record
}

// Limits bound what DecodeBatches accepts and allocates. A zero or negative
// field takes its DefaultLimits value.
type Limits struct {
	// MaxDecompressed bounds one batch's records after decompression: the
	// zip-bomb guard.
	MaxDecompressed int
	// MaxTotalBytes bounds the records of all batches of one call after
	// decompression.
	MaxTotalBytes int
	// MaxRecords bounds the records of one call, across its batches.
	MaxRecords int
	// MaxHeaders bounds one record's headers; MaxTotalHeaders those of one
	// call.
	MaxHeaders      int
	MaxTotalHeaders int
	// MaxKeyBytes bounds a record key or header key; MaxValueBytes a record
	// value or header value.
	MaxKeyBytes   int
	MaxValueBytes int
}

// DefaultLimits are generous for Kafka clients' defaults (1 MB batches) and
// keep one call's memory to a few hundred MiB at worst: records and headers
// are structs of about 100 and 40 bytes whatever their encoded size.
func DefaultLimits() Limits {
	return Limits{
		MaxDecompressed: 64 << 20,
		MaxTotalBytes:   128 << 20,
		MaxRecords:      1 << 18,
		MaxHeaders:      64,
		MaxTotalHeaders: 1 << 18,
		MaxKeyBytes:     1 << 20,
		MaxValueBytes:   64 << 20,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int }{
		{&l.MaxDecompressed, &d.MaxDecompressed}, {&l.MaxTotalBytes, &d.MaxTotalBytes},
		{&l.MaxRecords, &d.MaxRecords}, {&l.MaxHeaders, &d.MaxHeaders},
		{&l.MaxTotalHeaders, &d.MaxTotalHeaders}, {&l.MaxKeyBytes, &d.MaxKeyBytes},
		{&l.MaxValueBytes, &d.MaxValueBytes},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// budget is what is left of one DecodeBatches call's totals.
type budget struct {
	lim     Limits
	bytes   int
	records int
	headers int
}

// DecodeBatches decodes b, the Records of one Produce partition (or of a
// Fetch partition, without a partial last batch): a sequence of record
// batches v2, each checked whole — magic, Length, CRC32C, codec, the
// decompressed size, then every record against NumRecords and the limits.
// Empty b has no batches.
//
// Errors: ErrOldMessageFormat for a magic 0/1 message set, ErrCorruptBatch
// (truncation, bad magic or CRC, undecodable compression),
// ErrUnsupportedCompression, ErrTooLarge (a limit), ErrInvalidRecord
// (records that do not parse or disagree with the header). CodeFor gives
// the Kafka code to answer.
func DecodeBatches(b []byte, lim Limits) ([]Batch, error) {
	bud := budget{lim: lim.withDefaults()}
	bud.bytes, bud.records, bud.headers = bud.lim.MaxTotalBytes, bud.lim.MaxRecords, bud.lim.MaxTotalHeaders
	var out []Batch
	for len(b) > 0 {
		batch, n, err := decodeBatch(b, &bud)
		if err != nil {
			return nil, fmt.Errorf("batch %d: %w", len(out), err)
		}
		out = append(out, batch)
		b = b[n:]
	}
	return out, nil
}

// decodeBatch decodes the batch at the start of b and returns its length.
func decodeBatch(b []byte, bud *budget) (Batch, int, error) {
	rb, n, err := readBatchHeader(b)
	if err != nil {
		return Batch{}, 0, err
	}
	batch := batchOf(&rb)
	if batch.Compression > Zstd {
		return Batch{}, 0, fmt.Errorf("%w: codec %d", ErrUnsupportedCompression, batch.Compression)
	}
	if rb.NumRecords < 0 {
		return Batch{}, 0, fmt.Errorf("%w: %d records", ErrInvalidRecord, rb.NumRecords)
	}
	if int(rb.NumRecords) > bud.records {
		return Batch{}, 0, fmt.Errorf("%w: %d records, %d left of the limit", ErrTooLarge, rb.NumRecords, bud.records)
	}
	data, err := decompress(batch.Compression, rb.Records, min(bud.lim.MaxDecompressed, bud.bytes))
	if err != nil {
		return Batch{}, 0, err
	}
	bud.bytes -= len(data)
	batch.Records, err = parseRecords(data, int(rb.NumRecords), &batch, bud)
	if err != nil {
		return Batch{}, 0, err
	}
	return batch, n, nil
}

// readBatchHeader decodes the batch header at the start of b with kmsg,
// checks magic, Length and CRC, and returns the batch's wire length.
func readBatchHeader(b []byte) (kmsg.RecordBatch, int, error) {
	var rb kmsg.RecordBatch
	if len(b) <= magicAt {
		return rb, 0, fmt.Errorf("%w: %d bytes, shorter than a batch header", ErrCorruptBatch, len(b))
	}
	switch b[magicAt] {
	case 0, 1:
		return rb, 0, fmt.Errorf("%w: magic %d", ErrOldMessageFormat, b[magicAt])
	case 2:
	default:
		return rb, 0, fmt.Errorf("%w: magic %d", ErrCorruptBatch, b[magicAt])
	}
	if err := rb.ReadFrom(b); err != nil || rb.Length < batchFixedLen {
		return rb, 0, fmt.Errorf("%w: length %d of %d bytes", ErrCorruptBatch, rb.Length, len(b)-batchHeadLen)
	}
	n := batchHeadLen + int(rb.Length)
	if sum := crc32.Checksum(b[crcFrom:n], castagnoli); sum != uint32(rb.CRC) {
		return rb, 0, fmt.Errorf("%w: crc %08x, computed %08x", ErrCorruptBatch, uint32(rb.CRC), sum)
	}
	return rb, n, nil
}

// batchOf copies a kmsg batch header into a Batch.
func batchOf(rb *kmsg.RecordBatch) Batch {
	b := Batch{
		BaseOffset:           rb.FirstOffset,
		PartitionLeaderEpoch: rb.PartitionLeaderEpoch,
		Attributes:           rb.Attributes,
		LastOffsetDelta:      rb.LastOffsetDelta,
		FirstTimestamp:       rb.FirstTimestamp,
		MaxTimestamp:         rb.MaxTimestamp,
		ProducerID:           rb.ProducerID,
		ProducerEpoch:        rb.ProducerEpoch,
		BaseSequence:         rb.FirstSequence,
		Compression:          Codec(rb.Attributes & codecMask),
		Transactional:        rb.Attributes&transactionalFlag != 0,
		Control:              rb.Attributes&controlFlag != 0,
	}
	if rb.Attributes&logAppendTimeFlag != 0 {
		b.TimestampType = 1
	}
	return b
}

// ValidateProduce applies the checks a Kafka broker makes on a batch a
// client produces (ErrInvalidRecord): at least one record, offset deltas
// 0, 1, 2... with LastOffsetDelta the last, no control batch, CreateTime,
// and a producer id with a sequence if idempotent or transactional.
func ValidateProduce(b *Batch) error {
	n := len(b.Records)
	switch {
	case n == 0:
		return fmt.Errorf("%w: empty batch", ErrInvalidRecord)
	case int(b.LastOffsetDelta) != n-1:
		return fmt.Errorf("%w: last offset delta %d for %d records", ErrInvalidRecord, b.LastOffsetDelta, n)
	case b.Control:
		return fmt.Errorf("%w: clients may not write control batches", ErrInvalidRecord)
	case b.TimestampType != 0:
		return fmt.Errorf("%w: clients may not write LogAppendTime batches", ErrInvalidRecord)
	case b.Transactional && b.ProducerID < 0:
		return fmt.Errorf("%w: transactional batch without a producer id", ErrInvalidRecord)
	case b.ProducerID >= 0 && b.BaseSequence < 0:
		return fmt.Errorf("%w: producer id %d without a sequence", ErrInvalidRecord, b.ProducerID)
	}
	for i := range b.Records {
		if int(b.Records[i].OffsetDelta) != i {
			return fmt.Errorf("%w: record %d has offset delta %d", ErrInvalidRecord, i, b.Records[i].OffsetDelta)
		}
	}
	return nil
}
