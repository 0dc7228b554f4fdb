package kafkawire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fuzzMaxFrame is the frame limit under fuzzing.
const fuzzMaxFrame = 1 << 20

// fuzzLimits keep one fuzz input's decoding to a few MiB.
var fuzzLimits = Limits{MaxDecompressed: 1 << 20, MaxTotalBytes: 2 << 20, MaxRecords: 4096,
	MaxHeaders: 16, MaxTotalHeaders: 4096, MaxKeyBytes: 1024, MaxValueBytes: 1 << 20}

// FuzzReadRequest: ReadRequest never panics, fails only with its own
// errors (or io.EOF), and a decoded request re-encodes (with kmsg's
// formatter) to a frame that decodes to the same request.
func FuzzReadRequest(f *testing.F) {
	for i, r := range sampleRequests() {
		frame := frameOf(r, int32(i))
		f.Add(frame)
		f.Add(frame[:len(frame)/2])
	}
	f.Add(binary.BigEndian.AppendUint32(nil, 1<<31-1))
	f.Add([]byte{0, 0, 0, 14, 0x7f, 0, 0, 1, 0, 0, 0, 9, 0, 2, 'i', 'd', 0xde, 0xad})
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 99
	f.Add(frameOf(av, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := ReadRequest(bytes.NewReader(data), fuzzMaxFrame)
		if err != nil {
			if err != io.EOF && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("foreign error: %v", err)
			}
			return
		}
		if (req.Body == nil) != (req.Unsupported != Decoded) {
			t.Fatalf("Body %v with reason %v", req.Body != nil, req.Unsupported)
		}
		if req.Body == nil {
			return
		}
		checkRequestRoundTrip(t, req)
	})
}

// checkRequestRoundTrip re-encodes req as a client would and reads it back.
func checkRequestRoundTrip(t *testing.T, req *Request) {
	var frame []byte
	if req.Key == kmsg.ControlledShutdown.Int16() && req.Version == 0 {
		frame = frameOf(req.Body, req.CorrelationID) // no client id
	} else {
		frame = kmsg.NewRequestFormatter(kmsg.FormatterClientID(req.ClientID)).AppendRequest(nil, req.Body, req.CorrelationID)
	}
	if len(frame)-4 > fuzzMaxFrame {
		return // kmsg's encoding is larger than the input (null bytes become empty)
	}
	again, err := ReadRequest(bytes.NewReader(frame), fuzzMaxFrame)
	if err != nil {
		t.Fatalf("re-encoded %s v%d does not decode: %v", kmsg.NameForKey(req.Key), req.Version, err)
	}
	if again.Key != req.Key || again.Version != req.Version || again.CorrelationID != req.CorrelationID ||
		again.ClientID != req.ClientID || again.Body == nil {
		t.Fatalf("header changed: %+v, then %+v", req, again)
	}
	if !bytes.Equal(again.Body.AppendTo(nil), req.Body.AppendTo(nil)) {
		t.Fatalf("%s v%d body changed on a round trip", kmsg.NameForKey(req.Key), req.Version)
	}
}

// fuzzSpec is sampleSpec with a small last value, for the seed corpus.
func fuzzSpec(c Codec) BatchSpec {
	s := sampleSpec(c)
	s.Records[3].Value = bytes.Repeat([]byte{7}, 300)
	return s
}

// FuzzDecodeBatches: DecodeBatches never panics nor passes fuzzLimits,
// fails only with its own errors, and a decoded batch re-encoded by
// AppendBatch decodes to the same batch. With fix set, the input's batch
// CRCs are recomputed first, so that mutations reach the records and the
// decompressors.
func FuzzDecodeBatches(f *testing.F) {
	for _, c := range codecs {
		b, err := AppendBatch(nil, fuzzSpec(c))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
		f.Add(b[:len(b)-3], true)
		f.Add(append(append([]byte{}, b...), b...), false)
		f.Add(kmsgBatch(c, kmsgRecords(3), func(b []byte) []byte { return foreignCompress(f, c, b) }), false)
	}
	v1 := make([]byte, 40)
	v1[16] = 1
	f.Add(v1, false)
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix {
			fixCRCs(data)
		}
		batches, err := DecodeBatches(data, fuzzLimits)
		if err != nil {
			for _, e := range []error{ErrOldMessageFormat, ErrCorruptBatch, ErrInvalidRecord, ErrUnsupportedCompression, ErrTooLarge} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("foreign error: %v", err)
		}
		checkWithinLimits(t, batches)
		for i := range batches {
			checkBatchRoundTrip(t, &batches[i])
		}
	})
}

// fixCRCs recomputes the CRC of each whole batch in data, in place.
func fixCRCs(data []byte) {
	for len(data) >= batchHeadLen+batchFixedLen {
		n := batchHeadLen + int(int32(binary.BigEndian.Uint32(data[8:])))
		if n < batchHeadLen+batchFixedLen || n > len(data) {
			return
		}
		binary.BigEndian.PutUint32(data[crcAt:], crc32.Checksum(data[crcFrom:n], castagnoli))
		data = data[n:]
	}
}

func checkWithinLimits(t *testing.T, batches []Batch) {
	records, headers := 0, 0
	for _, b := range batches {
		records += len(b.Records)
		for _, r := range b.Records {
			headers += len(r.Headers)
			if len(r.Headers) > fuzzLimits.MaxHeaders || len(r.Key) > fuzzLimits.MaxKeyBytes || len(r.Value) > fuzzLimits.MaxValueBytes {
				t.Fatalf("a record past the limits: %d headers, %d-byte key, %d-byte value", len(r.Headers), len(r.Key), len(r.Value))
			}
		}
	}
	if records > fuzzLimits.MaxRecords || headers > fuzzLimits.MaxTotalHeaders {
		t.Fatalf("%d records, %d headers: past the limits", records, headers)
	}
}

// specOf is the BatchSpec that encodes b again: create times rebuilt from
// the deltas, the producer fields as they are.
func specOf(b *Batch) BatchSpec {
	s := BatchSpec{BaseOffset: b.BaseOffset, PartitionLeaderEpoch: b.PartitionLeaderEpoch, Compression: b.Compression,
		LogAppendTime: b.TimestampType == 1, AppendTime: b.MaxTimestamp, Transactional: b.Transactional, Control: b.Control,
		ProducerID: b.ProducerID, ProducerEpoch: b.ProducerEpoch, BaseSequence: b.BaseSequence}
	for _, r := range b.Records {
		r.Timestamp = b.FirstTimestamp + r.TimestampDelta
		s.Records = append(s.Records, r)
	}
	return s
}

func checkBatchRoundTrip(t *testing.T, b *Batch) {
	spec := specOf(b)
	enc, err := AppendBatch(nil, spec)
	if err != nil {
		if !errors.Is(err, ErrBadSpec) {
			t.Fatalf("foreign error: %v", err)
		}
		if checkSpec(&spec) == nil {
			t.Fatalf("a decoded batch with a valid spec does not encode: %v", err)
		}
		return // an empty batch or one whose offset deltas do not increase
	}
	again, err := DecodeBatches(enc, fuzzLimits)
	if err != nil || len(again) != 1 {
		t.Fatalf("re-encoded batch: %d batches, %v", len(again), err)
	}
	got := again[0]
	if got.BaseOffset != b.BaseOffset || got.PartitionLeaderEpoch != b.PartitionLeaderEpoch || got.Compression != b.Compression ||
		got.TimestampType != b.TimestampType || got.Transactional != b.Transactional || got.Control != b.Control ||
		got.ProducerID != b.ProducerID || got.ProducerEpoch != b.ProducerEpoch || got.BaseSequence != b.BaseSequence ||
		got.LastOffsetDelta != spec.Records[len(spec.Records)-1].OffsetDelta {
		t.Fatalf("header changed:\n %+v\n %+v", b, got)
	}
	if want := wantRecords(spec); !reflect.DeepEqual(normal(got.Records), normal(want)) {
		t.Fatalf("records changed:\n got %+v\nwant %+v", got.Records, want)
	}
}

// normal makes empty header lists nil, as the decoder returns them.
func normal(recs []Record) []Record {
	for i := range recs {
		if len(recs[i].Headers) == 0 {
			recs[i].Headers = nil
		}
	}
	return recs
}

// FuzzParsePlain: ParsePlain never panics, fails only with ErrBadPlain, and
// what it accepts is exactly its three fields joined by NULs.
func FuzzParsePlain(f *testing.F) {
	f.Add([]byte("\x00alice\x00secret"))
	f.Add([]byte("admin\x00alice\x00secret"))
	f.Add([]byte("\x00\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		z, u, p, err := ParsePlain(in)
		if err != nil {
			if !errors.Is(err, ErrBadPlain) {
				t.Fatalf("foreign error: %v", err)
			}
			return
		}
		if z+"\x00"+u+"\x00"+p != string(in) || u == "" || p == "" {
			t.Fatalf("%q parsed as %q %q %q", in, z, u, p)
		}
	})
}
