package kafkawire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sampleRequests are requests of several keys and versions, plain and
// flexible, with the header quirk of ControlledShutdown v0.
func sampleRequests() []kmsg.Request {
	var out []kmsg.Request
	for v := int16(0); v <= 4; v++ {
		r := kmsg.NewPtrApiVersionsRequest()
		r.Version, r.ClientSoftwareName, r.ClientSoftwareVersion = v, "kgo", "1.0"
		out = append(out, r)
	}
	for _, v := range []int16{1, 9, 12} {
		r := kmsg.NewPtrMetadataRequest()
		r.Version = v
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr("orders")
		r.Topics = append(r.Topics, t)
		out = append(out, r)
	}
	for _, v := range []int16{3, 9} {
		out = append(out, sampleProduce(v))
	}
	for _, v := range []int16{4, 12} {
		r := kmsg.NewPtrFetchRequest()
		r.Version, r.MaxWaitMillis, r.MaxBytes = v, 500, 1<<20
		t := kmsg.NewFetchRequestTopic()
		t.Topic = "orders"
		p := kmsg.NewFetchRequestTopicPartition()
		p.FetchOffset, p.PartitionMaxBytes = 7, 1<<20
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
		out = append(out, r)
	}
	h := kmsg.NewPtrSASLHandshakeRequest()
	h.Version, h.Mechanism = 1, "PLAIN"
	a := kmsg.NewPtrSASLAuthenticateRequest()
	a.Version, a.SASLAuthBytes = 2, []byte("\x00alice\x00secret")
	cs := kmsg.NewPtrControlledShutdownRequest()
	cs.Version, cs.BrokerID = 0, 3
	return append(out, h, a, cs)
}

func sampleProduce(v int16) *kmsg.ProduceRequest {
	batch, err := AppendBatch(nil, fuzzSpec(NoCompression))
	if err != nil {
		panic(err)
	}
	r := kmsg.NewPtrProduceRequest()
	r.Version, r.Acks, r.TimeoutMillis = v, -1, 1000
	t := kmsg.NewProduceRequestTopic()
	t.Topic = "orders"
	p := kmsg.NewProduceRequestTopicPartition()
	p.Records = batch
	t.Partitions = append(t.Partitions, p)
	r.Topics = append(r.Topics, t)
	return r
}

// frameOf frames r as a client does, with client id "client-1".
// ControlledShutdown v0, which kmsg's formatter leaves without size or
// body, is framed here: header v0 has no client id.
func frameOf(r kmsg.Request, corr int32) []byte {
	if r.Key() != kmsg.ControlledShutdown.Int16() || r.GetVersion() != 0 {
		return kmsg.NewRequestFormatter(kmsg.FormatterClientID("client-1")).AppendRequest(nil, r, corr)
	}
	frame := []byte{0, 0, 0, 0, 0, 7, 0, 0}
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	frame = r.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

func TestReadRequestDecodesKmsgFrames(t *testing.T) {
	for i, want := range sampleRequests() {
		frame := frameOf(want, int32(100+i))
		got, err := ReadRequest(bytes.NewReader(frame), 0)
		if err != nil {
			t.Fatalf("%s v%d: %v", kmsg.NameForKey(want.Key()), want.GetVersion(), err)
		}
		name := kmsg.NameForKey(want.Key())
		wantID := "client-1"
		if want.Key() == kmsg.ControlledShutdown.Int16() && want.GetVersion() == 0 {
			wantID = "" // header v0 has no client id
		}
		switch {
		case got.Key != want.Key() || got.Version != want.GetVersion() || got.CorrelationID != int32(100+i):
			t.Fatalf("%s: header %d v%d corr %d", name, got.Key, got.Version, got.CorrelationID)
		case got.ClientID != wantID:
			t.Fatalf("%s: client id %q", name, got.ClientID)
		case got.Unsupported != Decoded || got.Body == nil:
			t.Fatalf("%s: not decoded: %v", name, got.Unsupported)
		case !bytes.Equal(got.Body.AppendTo(nil), want.AppendTo(nil)):
			t.Fatalf("%s v%d: body differs", name, want.GetVersion())
		case !bytes.Equal(got.Raw, frame[4:]):
			t.Fatalf("%s: Raw is not the frame", name)
		}
	}
}

// TestReadRequestStream reads pipelined frames off one stream, then a clean
// end.
func TestReadRequestStream(t *testing.T) {
	var stream []byte
	reqs := sampleRequests()
	for i, r := range reqs {
		stream = append(stream, frameOf(r, int32(i))...)
	}
	rd := bytes.NewReader(stream)
	for i := range reqs {
		got, err := ReadRequest(rd, 1<<20)
		if err != nil || got.CorrelationID != int32(i) {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if _, err := ReadRequest(rd, 1<<20); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadRequestTruncated(t *testing.T) {
	frame := frameOf(sampleRequests()[0], 1)
	for _, n := range []int{1, 3, 4, 9, len(frame) - 1} {
		_, err := ReadRequest(bytes.NewReader(frame[:n]), 0)
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d of %d bytes: %v", n, len(frame), err)
		}
	}
}

func TestReadRequestRefusesSizes(t *testing.T) {
	for _, c := range []struct {
		size int32
		want error
	}{{-1, ErrMalformed}, {0, ErrMalformed}, {7, ErrMalformed}, {1 << 20, ErrFrameTooLarge}, {1<<31 - 1, ErrFrameTooLarge}} {
		frame := binary.BigEndian.AppendUint32(nil, uint32(c.size))
		frame = append(frame, make([]byte, 16)...)
		if _, err := ReadRequest(bytes.NewReader(frame), 1<<20-1); !errors.Is(err, c.want) {
			t.Fatalf("size %d: %v, want %v", c.size, err, c.want)
		}
	}
}

// allocated returns the bytes allocated by n calls of f.
func allocated(n int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestReadRequestAllocatesWhatArrives: a frame claiming 2 GiB is refused
// without allocating it, and one claiming 64 MiB of which 1 KiB arrives
// costs about the first read chunk, not 64 MiB.
func TestReadRequestAllocatesWhatArrives(t *testing.T) {
	huge := binary.BigEndian.AppendUint32(nil, 1<<31-1)
	if n := allocated(100, func() {
		if _, err := ReadRequest(bytes.NewReader(huge), 0); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatal(err)
		}
	}); n > 100*1024 {
		t.Fatalf("refusing a 2 GiB frame allocated %d bytes per call", n/100)
	}
	short := append(binary.BigEndian.AppendUint32(nil, 64<<20), make([]byte, 1024)...)
	if n := allocated(10, func() {
		if _, err := ReadRequest(bytes.NewReader(short), 0); !errors.Is(err, ErrTruncated) {
			t.Fatal(err)
		}
	}); n > 10*4*readChunk { // slack for the race detector's own allocations
		t.Fatalf("a truncated 64 MiB frame allocated %d bytes per call", n/10)
	}
}

func TestReadRequestUnknownKeyAndVersion(t *testing.T) {
	unknown := []byte{0x7f, 0x00, 0, 1, 0, 0, 0, 9, 0, 2, 'i', 'd', 0xde, 0xad}
	frame := append(binary.BigEndian.AppendUint32(nil, uint32(len(unknown))), unknown...)
	got, err := ReadRequest(bytes.NewReader(frame), 0)
	if err != nil || got.Unsupported != UnknownKey || got.Body != nil || got.ClientID != "id" || got.CorrelationID != 9 {
		t.Fatalf("unknown key: %+v, %v", got, err)
	}
	if UnsupportedVersionResponse(got, nil) != nil {
		t.Fatal("an unknown key has no answer")
	}

	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 99
	got, err = ReadRequest(bytes.NewReader(frameOf(av, 5)), 0)
	if err != nil || got.Unsupported != UnknownVersion || got.Body != nil || got.ClientID != "client-1" {
		t.Fatalf("ApiVersions v99: %+v, %v", got, err)
	}
}

// TestUnsupportedApiVersions is KIP-511: an ApiVersions version not served
// is answered at v0 with UNSUPPORTED_VERSION and the served ApiVersions
// range.
func TestUnsupportedApiVersions(t *testing.T) {
	served := Versions{kmsg.ApiVersions.Int16(): {0, 3}, kmsg.Metadata.Int16(): {1, 12}}
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 4
	req, err := ReadServedRequest(bytes.NewReader(frameOf(av, 77)), 0, served)
	if err != nil || req.Unsupported != NotServed || req.Body != nil {
		t.Fatalf("ApiVersions v4 against 0..3: %+v, %v", req, err)
	}
	frame := AppendResponse(nil, req.CorrelationID, UnsupportedVersionResponse(req, served))
	if binary.BigEndian.Uint32(frame) != uint32(len(frame)-4) || binary.BigEndian.Uint32(frame[4:]) != 77 {
		t.Fatalf("frame head %x", frame[:8])
	}
	resp := kmsg.NewPtrApiVersionsResponse() // version 0
	if err := resp.ReadFrom(frame[8:]); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) != 1 ||
		resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MinVersion != 0 || resp.ApiKeys[0].MaxVersion != 3 {
		t.Fatalf("answer %+v", resp)
	}
}

func TestReadServedRequestSkipsUnserved(t *testing.T) {
	served := Versions{kmsg.ApiVersions.Int16(): {0, 4}, kmsg.Metadata.Int16(): {4, 12}}
	for _, r := range sampleRequests() {
		got, err := ReadServedRequest(bytes.NewReader(frameOf(r, 1)), 0, served)
		if err != nil {
			t.Fatal(err)
		}
		if want := served.Serves(r.Key(), r.GetVersion()); want != (got.Body != nil) || !want && got.Unsupported != NotServed {
			t.Fatalf("%s v%d: served %v, got %v", kmsg.NameForKey(r.Key()), r.GetVersion(), want, got.Unsupported)
		}
	}
}

func TestReadRequestMalformed(t *testing.T) {
	r := kmsg.NewPtrMetadataRequest()
	r.Version = 9
	r.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("orders")}}
	frame := frameOf(r, 1)
	cut := frame[:len(frame)-5]
	binary.BigEndian.PutUint32(cut, uint32(len(cut)-4))
	if _, err := ReadRequest(bytes.NewReader(cut), 0); !errors.Is(err, ErrMalformed) || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut body: %v", err)
	}
	head := []byte{0, 3, 0, 9, 0, 0, 0, 1, 0, 5, 'a'} // client id claims 5 bytes
	frame = append(binary.BigEndian.AppendUint32(nil, uint32(len(head))), head...)
	if _, err := ReadRequest(bytes.NewReader(frame), 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("cut client id: %v", err)
	}
}

// TestAppendResponseHeaders: response header v1 (a tag section) for
// flexible responses, v0 otherwise and always for ApiVersions.
func TestAppendResponseHeaders(t *testing.T) {
	for _, c := range []struct {
		resp   kmsg.Response
		tagged bool
	}{
		{&kmsg.MetadataResponse{Version: 1}, false},
		{&kmsg.MetadataResponse{Version: 9}, true},
		{&kmsg.ApiVersionsResponse{Version: 2}, false},
		{&kmsg.ApiVersionsResponse{Version: 3}, false},
		{&kmsg.FetchResponse{Version: 12}, true},
		{&kmsg.ProduceResponse{Version: 8}, false},
	} {
		frame := AppendResponse([]byte("prefix"), 42, c.resp)
		frame = frame[len("prefix"):]
		body := frame[8:]
		if c.tagged {
			if body[0] != 0 {
				t.Fatalf("%T v%d: header tags %x", c.resp, c.resp.GetVersion(), body[0])
			}
			body = body[1:]
		}
		if int(binary.BigEndian.Uint32(frame)) != len(frame)-4 || binary.BigEndian.Uint32(frame[4:]) != 42 ||
			!bytes.Equal(body, c.resp.AppendTo(nil)) {
			t.Fatalf("%T v%d: frame %x", c.resp, c.resp.GetVersion(), frame)
		}
	}
}

func TestVersions(t *testing.T) {
	good := Versions{kmsg.ApiVersions.Int16(): {0, 3}, kmsg.Produce.Int16(): {3, 9}, kmsg.Fetch.Int16(): {4, 12}}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Versions{
		{kmsg.Produce.Int16(): {3, 9}},
		{kmsg.ApiVersions.Int16(): {0, 3}, 30000: {0, 0}},
		{kmsg.ApiVersions.Int16(): {0, 99}},
		{kmsg.ApiVersions.Int16(): {3, 2}},
		{kmsg.ApiVersions.Int16(): {-1, 2}},
	} {
		if err := bad.Check(); !errors.Is(err, ErrBadVersions) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
	resp := ApiVersionsResponse(3, good)
	if resp.Version != 3 || len(resp.ApiKeys) != 3 || resp.ApiKeys[0].ApiKey != 0 || resp.ApiKeys[1].ApiKey != 1 ||
		resp.ApiKeys[2].ApiKey != 18 || resp.ApiKeys[0].MinVersion != 3 || resp.ApiKeys[0].MaxVersion != 9 {
		t.Fatalf("%+v", resp.ApiKeys)
	}
	if !good.Serves(1, 12) || good.Serves(1, 13) || good.Serves(2, 0) {
		t.Fatal("Serves")
	}
}
