package kafkawire

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var codecs = []Codec{NoCompression, Gzip, Snappy, LZ4, Zstd}

// sampleSpec has null and empty keys and values, headers with a null
// value, offset gaps and a timestamp before the first.
func sampleSpec(c Codec) BatchSpec {
	return BatchSpec{
		BaseOffset: 1000, PartitionLeaderEpoch: 4, Compression: c, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		Records: []Record{
			{OffsetDelta: 0, Timestamp: 1_700_000_000_000, Key: []byte("k0"), Value: []byte(strings.Repeat("value ", 50))},
			{OffsetDelta: 1, Timestamp: 1_699_999_999_000, Key: nil, Value: []byte{}},
			{OffsetDelta: 5, Timestamp: 1_700_000_000_500, Key: []byte{}, Value: nil,
				Headers: []Header{{Key: "trace", Value: []byte("abc")}, {Key: "", Value: nil}, {Key: "e", Value: []byte{}}}},
			{OffsetDelta: 300, Timestamp: 1_700_000_100_000, Key: []byte("k3"), Value: bytes.Repeat([]byte{7}, 70_000)},
		},
	}
}

// wantRecords is what DecodeBatches returns for spec's records.
func wantRecords(s BatchSpec) []Record {
	out := make([]Record, len(s.Records))
	for i, r := range s.Records {
		r.TimestampDelta = r.Timestamp - s.Records[0].Timestamp
		if s.LogAppendTime {
			r.Timestamp = s.AppendTime
		}
		out[i] = r
	}
	return out
}

func TestBatchRoundTrip(t *testing.T) {
	for _, c := range codecs {
		for _, prod := range [][3]int64{{-1, -1, -1}, {77, 2, 40}} {
			spec := sampleSpec(c)
			spec.ProducerID, spec.ProducerEpoch, spec.BaseSequence = prod[0], int16(prod[1]), int32(prod[2])
			b, err := AppendBatch([]byte("x"), spec)
			if err != nil {
				t.Fatal(err)
			}
			batches, err := DecodeBatches(b[1:], Limits{})
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			got := batches[0]
			switch {
			case len(batches) != 1 || got.Compression != c || got.BaseOffset != 1000 || got.PartitionLeaderEpoch != 4:
				t.Fatalf("%s: %+v", c, got)
			case got.LastOffsetDelta != 300 || got.FirstTimestamp != 1_700_000_000_000 || got.MaxTimestamp != 1_700_000_100_000:
				t.Fatalf("%s: derived fields %+v", c, got)
			case got.ProducerID != prod[0] || int64(got.ProducerEpoch) != prod[1] || int64(got.BaseSequence) != prod[2] || got.TimestampType != 0 || got.Transactional || got.Control:
				t.Fatalf("%s: producer/flags %+v", c, got)
			case !reflect.DeepEqual(got.Records, wantRecords(spec)):
				t.Fatalf("%s: records differ:\n got %+v\nwant %+v", c, got.Records, wantRecords(spec))
			}
		}
	}
}

func TestBatchFlagsRoundTrip(t *testing.T) {
	spec := sampleSpec(LZ4)
	spec.LogAppendTime, spec.AppendTime, spec.Transactional, spec.Control = true, 1_800_000_000_000, true, true
	spec.ProducerID, spec.ProducerEpoch, spec.BaseSequence = 1, 0, 0
	b, err := AppendBatch(nil, spec)
	if err != nil {
		t.Fatal(err)
	}
	batches, err := DecodeBatches(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got := batches[0]
	if got.TimestampType != 1 || !got.Transactional || !got.Control || got.MaxTimestamp != spec.AppendTime ||
		!reflect.DeepEqual(got.Records, wantRecords(spec)) {
		t.Fatalf("%+v", got)
	}
}

// TestAppendBatchReadByKmsg reads AppendBatch's output with franz-go's own
// decoders: the batch with kmsg.RecordBatch, each record with kmsg.Record.
func TestAppendBatchReadByKmsg(t *testing.T) {
	spec := sampleSpec(NoCompression)
	b, err := AppendBatch(nil, spec)
	if err != nil {
		t.Fatal(err)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if int(rb.Length) != len(b)-12 || rb.Magic != 2 || rb.NumRecords != 4 ||
		uint32(rb.CRC) != crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatalf("%+v", rb)
	}
	rest := rb.Records
	for i, want := range wantRecords(spec) {
		length, n := binary.Varint(rest)
		var r kmsg.Record
		if err := r.ReadFrom(rest[:n+int(length)]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n+int(length):]
		if r.OffsetDelta != want.OffsetDelta || r.TimestampDelta64 != want.TimestampDelta ||
			!reflect.DeepEqual(r.Key, want.Key) || !reflect.DeepEqual(r.Value, want.Value) ||
			len(r.Headers) != len(want.Headers) || len(want.Headers) > 0 && !reflect.DeepEqual(r.Headers, want.Headers) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left", len(rest))
	}
}

// foreignCompress compresses with encoders other than this package's:
// stdlib gzip, one raw snappy block, lz4 with 4 MiB blocks and block
// checksums, streaming zstd (no content size).
func foreignCompress(t testing.TB, c Codec, src []byte) []byte {
	var buf bytes.Buffer
	switch c {
	case NoCompression:
		return src
	case Snappy:
		return snappy.Encode(nil, src)
	case Gzip:
		w := stdgzip.NewWriter(&buf)
		_, _ = w.Write(src)
		_ = w.Close()
	case LZ4:
		w := lz4.NewWriter(&buf)
		if err := w.Apply(lz4.BlockChecksumOption(true)); err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(src)
		_ = w.Close()
	case Zstd:
		w, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(src)
		_ = w.Close()
	}
	return buf.Bytes()
}

// kmsgBatch builds a batch the way franz-go's producer does: kmsg.Record
// and kmsg.RecordBatch AppendTo, the records compressed by compress.
func kmsgBatch(c Codec, recs []kmsg.Record, compress func([]byte) []byte) []byte {
	var raw []byte
	for i := range recs {
		body := recs[i]
		body.Length = 0
		n := len(body.AppendTo(nil)) - 1 // less the 1-byte zero Length
		recs[i].Length = int32(n)
		raw = recs[i].AppendTo(raw)
	}
	payload := compress(raw)
	rb := kmsg.RecordBatch{FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, Attributes: int16(c),
		LastOffsetDelta: int32(len(recs) - 1), FirstTimestamp: 5000, MaxTimestamp: 5000 + int64(len(recs)),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(recs)), Records: payload}
	rb.Length = int32(49 + len(payload))
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func kmsgRecords(n int) []kmsg.Record {
	recs := make([]kmsg.Record, n)
	for i := range recs {
		recs[i] = kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i),
			Key: []byte{byte(i)}, Value: []byte(strings.Repeat("payload ", 20+i)),
			Headers: []kmsg.Header{{Key: "h", Value: []byte{byte(i)}}}}
	}
	return recs
}

// TestDecodeForeignBatches decodes batches built by kmsg with other
// compressors, and xerial-framed snappy as the Java client sends it, two
// batches back to back.
func TestDecodeForeignBatches(t *testing.T) {
	recs := kmsgRecords(50)
	for _, c := range codecs {
		one := kmsgBatch(c, recs, func(b []byte) []byte { return foreignCompress(t, c, b) })
		in := append(append([]byte{}, one...), one...)
		if c == Snappy {
			in = append(in, kmsgBatch(c, recs, xerialBytes)...)
		}
		batches, err := DecodeBatches(in, Limits{})
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		for _, b := range batches {
			if b.Compression != c || len(b.Records) != len(recs) {
				t.Fatalf("%s: %+v", c, b)
			}
			for i, r := range b.Records {
				k := recs[i]
				if r.OffsetDelta != k.OffsetDelta || r.Timestamp != 5000+int64(i) || !bytes.Equal(r.Value, k.Value) ||
					!reflect.DeepEqual(r.Headers, k.Headers) {
					t.Fatalf("%s: record %d: %+v", c, i, r)
				}
			}
		}
	}
}

// reCRC recomputes a batch's CRC after a test edited it.
func reCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

func TestDecodeBatchesRefuses(t *testing.T) {
	good, err := AppendBatch(nil, sampleSpec(Gzip))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, good...)) }
	v1 := make([]byte, 40) // a message set v1 entry: magic at 16
	v1[16] = 1
	for name, c := range map[string]struct {
		in   []byte
		want error
		code int16
	}{
		"message set v1": {v1, ErrOldMessageFormat, kerr.UnsupportedForMessageFormat.Code},
		"magic 3":        {edit(func(b []byte) []byte { b[16] = 3; return b }), ErrCorruptBatch, kerr.CorruptMessage.Code},
		"crc":            {edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrCorruptBatch, kerr.CorruptMessage.Code},
		"truncated":      {good[:len(good)-1], ErrCorruptBatch, kerr.CorruptMessage.Code},
		"short":          {good[:10], ErrCorruptBatch, kerr.CorruptMessage.Code},
		"length < 49": {edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 48); return b }),
			ErrCorruptBatch, kerr.CorruptMessage.Code},
		"codec 5": {edit(func(b []byte) []byte { b[22] |= 5; return reCRC(b) }),
			ErrUnsupportedCompression, kerr.UnsupportedCompressionType.Code},
		"bad gzip": {edit(func(b []byte) []byte { b[61] ^= 0xff; return reCRC(b) }), ErrCorruptBatch, kerr.CorruptMessage.Code},
		"count +1": {edit(func(b []byte) []byte { b[60]++; return reCRC(b) }), ErrInvalidRecord, kerr.InvalidRecord.Code},
		"count -1": {edit(func(b []byte) []byte { b[60]--; return reCRC(b) }), ErrInvalidRecord, kerr.InvalidRecord.Code},
		"negative count": {edit(func(b []byte) []byte { b[57] = 0xff; return reCRC(b) }),
			ErrInvalidRecord, kerr.InvalidRecord.Code},
	} {
		_, err := DecodeBatches(c.in, Limits{})
		if !errors.Is(err, c.want) || CodeFor(err) != c.code {
			t.Fatalf("%s: %v (code %d), want %v", name, err, CodeFor(err), c.want)
		}
	}
}

func TestDecodeBatchesLimits(t *testing.T) {
	spec := sampleSpec(Zstd)
	b, err := AppendBatch(nil, spec)
	if err != nil {
		t.Fatal(err)
	}
	for name, lim := range map[string]Limits{
		"batch bytes":   {MaxDecompressed: 70_000},
		"total bytes":   {MaxTotalBytes: 70_000},
		"records":       {MaxRecords: 3},
		"headers":       {MaxHeaders: 2},
		"total headers": {MaxTotalHeaders: 2},
		"key":           {MaxKeyBytes: 1},
		"value":         {MaxValueBytes: 69_999},
	} {
		if _, err := DecodeBatches(b, lim); !errors.Is(err, ErrTooLarge) || CodeFor(err) != kerr.MessageTooLarge.Code {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// The totals span batches: each of two batches fits, both do not.
	two := append(append([]byte{}, b...), b...)
	if _, err := DecodeBatches(two, Limits{MaxRecords: 7}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("records across batches: %v", err)
	}
	if _, err := DecodeBatches(two, Limits{MaxRecords: 8}); err != nil {
		t.Fatal(err)
	}
}

// TestDecompressionBombs: 16 MiB of zeros compressed by every codec, or a
// header array claimed by a run of zeros, is refused at a 1 MiB limit
// without being decompressed or allocated whole.
func TestDecompressionBombs(t *testing.T) {
	zeros := make([]byte, 16<<20)
	lim := Limits{MaxDecompressed: 1 << 20}
	for _, c := range codecs[1:] {
		spec := BatchSpec{Compression: c, ProducerID: -1, Records: []Record{{Value: zeros}}}
		b, err := AppendBatch(nil, spec)
		if err != nil {
			t.Fatal(err)
		}
		if n := allocated(1, func() {
			if _, err := DecodeBatches(b, lim); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%s: %v", c, err)
			}
		}); n > 8<<20 {
			t.Fatalf("%s: refusing a bomb allocated %d bytes", c, n)
		}
	}
	// One record whose header count claims most of 1 MiB of zeros.
	raw := binary.AppendVarint(nil, 1<<20-8)
	raw = append(raw, 0, 0, 0, 1, 1) // attributes, deltas, null key and value
	raw = binary.AppendVarint(raw, 500_000)
	raw = append(raw, make([]byte, 1<<20-len(raw))...)
	rb := kmsg.RecordBatch{Magic: 2, NumRecords: 1, Records: raw, Length: int32(49 + len(raw))}
	if _, err := DecodeBatches(reCRC(rb.AppendTo(nil)), Limits{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("header bomb: %v", err)
	}
}

func TestAppendBatchRefuses(t *testing.T) {
	for name, s := range map[string]BatchSpec{
		"no records":     {},
		"codec 6":        {Compression: 6, Records: []Record{{}}},
		"negative delta": {Records: []Record{{OffsetDelta: -1}}},
		"equal deltas":   {Records: []Record{{OffsetDelta: 2}, {OffsetDelta: 2}}},
		"falling deltas": {Records: []Record{{OffsetDelta: 2}, {OffsetDelta: 1}}},
	} {
		if out, err := AppendBatch([]byte("keep"), s); !errors.Is(err, ErrBadSpec) || string(out) != "keep" {
			t.Fatalf("%s: %q, %v", name, out, err)
		}
	}
}

func TestValidateProduce(t *testing.T) {
	ok := func() Batch {
		return Batch{LastOffsetDelta: 1, ProducerID: -1, BaseSequence: -1,
			Records: []Record{{OffsetDelta: 0}, {OffsetDelta: 1}}}
	}
	b := ok()
	if err := ValidateProduce(&b); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*Batch){
		"empty":          func(b *Batch) { b.Records = nil },
		"last delta":     func(b *Batch) { b.LastOffsetDelta = 2 },
		"gap":            func(b *Batch) { b.Records[1].OffsetDelta = 2; b.LastOffsetDelta = 2 },
		"control":        func(b *Batch) { b.Control = true },
		"append time":    func(b *Batch) { b.TimestampType = 1 },
		"txn, no pid":    func(b *Batch) { b.Transactional = true },
		"pid, no seqnum": func(b *Batch) { b.ProducerID = 5 },
	} {
		b := ok()
		f(&b)
		if err := ValidateProduce(&b); !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

func TestCodeFor(t *testing.T) {
	if CodeFor(nil) != 0 || CodeFor(errors.New("other")) != kerr.UnknownServerError.Code ||
		CodeFor(ErrMalformed) != kerr.InvalidRequest.Code {
		t.Fatal("CodeFor")
	}
}

// rawBatch wraps raw records (uncompressed, or compressed with c) in a
// batch with a valid CRC claiming n records.
func rawBatch(c Codec, raw []byte, n int32) []byte {
	rb := kmsg.RecordBatch{Magic: 2, Attributes: int16(c), NumRecords: n, Records: raw, Length: int32(49 + len(raw))}
	return reCRC(rb.AppendTo(nil))
}

// rawRecord frames a record body with its varint length.
func rawRecord(body ...byte) []byte {
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}

func TestDecodeRecordsRefuses(t *testing.T) {
	ok := []byte{0, 0, 0, 1, 1, 0} // attributes, deltas, null key and value, no headers
	if _, err := DecodeBatches(rawBatch(NoCompression, rawRecord(ok...), 1), Limits{}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		raw  []byte
		want error
	}{
		"trailing field bytes": {rawRecord(append(ok, 9)...), ErrInvalidRecord},
		"bytes after records":  {append(rawRecord(ok...), 0, 0, 0, 0, 0, 0, 0, 0), ErrInvalidRecord},
		"length past the end":  {append(binary.AppendVarint(nil, 40), ok...), ErrInvalidRecord},
		"negative length":      {append(binary.AppendVarint(nil, -3), ok...), ErrInvalidRecord},
		"short field":          {rawRecord(0, 0, 0, 20, 'a'), ErrInvalidRecord},
		"overlong varint":      {rawRecord(0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), ErrInvalidRecord},
		"32-bit overflow":      {rawRecord(0, 0, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 1, 0), ErrInvalidRecord},
		"null header key":      {rawRecord(0, 0, 0, 1, 1, 2, 1, 1), ErrInvalidRecord},
		"negative headers":     {rawRecord(0, 0, 0, 1, 1, 1), ErrInvalidRecord},
		"headers past the end": {rawRecord(0, 0, 0, 1, 1, 8, 0, 0), ErrInvalidRecord},
	} {
		if _, err := DecodeBatches(rawBatch(NoCompression, c.raw, 1), Limits{}); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestXerialFraming(t *testing.T) {
	raw := bytes.Repeat(rawRecord(0, 0, 0, 1, 1, 0), 10_000) // 70 kB: three xerial chunks
	x := xerialBytes(raw)
	if _, err := DecodeBatches(rawBatch(Snappy, x, 10_000), Limits{}); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"short header":     x[:12],
		"short length":     x[:18],
		"chunk past end":   x[:len(x)-1],
		"corrupt chunk":    append(append([]byte{}, x[:20]...), bytes.Repeat([]byte{0xff}, 40)...),
		"corrupt raw":      {0xff, 0xff, 0xff},
		"bad chunk length": binary.BigEndian.AppendUint32(append([]byte{}, x[:16]...), 1<<31),
	} {
		if _, err := DecodeBatches(rawBatch(Snappy, bad, 10_000), Limits{}); !errors.Is(err, ErrCorruptBatch) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := DecodeBatches(rawBatch(Snappy, x, 10_000), Limits{MaxDecompressed: 40_000}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("xerial past the limit: %v", err)
	}
}
