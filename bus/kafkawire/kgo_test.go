package kafkawire

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The tests here run franz-go's client, kgo, against a fake broker made of
// this package: ReadServedRequest, AppendResponse, the Versions answers,
// AppendBatch for Fetch and DecodeBatches for Produce. Connections are
// in-memory pipes (kgo.Dialer); nothing touches the network.

const fakeTopic = "t"

// fakeServed is the fake broker's table. ApiVersions stops at 3 so that
// kgo, which asks at its own higher version first, goes through KIP-511's
// downgrade. Produce starts at 0 and FindCoordinator is listed from 0 only
// for librdkafka (up to 2.11 at least), which compresses with gzip, snappy
// or lz4 only if the broker's Produce range reaches v0, and with lz4 only if
// its FindCoordinator range does (kcat_test.go).
var fakeServed = Versions{
	kmsg.ApiVersions.Int16():     {0, 3},
	kmsg.Metadata.Int16():        {1, 9},
	kmsg.FindCoordinator.Int16(): {0, 4},
	kmsg.Produce.Int16():         {0, 9},
	kmsg.Fetch.Int16():           {4, 12},
	kmsg.ListOffsets.Int16():     {1, 7},
	kmsg.InitProducerID.Int16():  {0, 4},
}

// fakeBroker is one broker leading every partition of fakeTopic: partition
// p fetches fetchBatches[p] at offset 0, and records what is produced.
type fakeBroker struct {
	host  string // advertised in Metadata
	port  int32
	fetch map[int32][]byte // read-only once serving
	hwm   map[int32]int64
	done  chan struct{} // closed at the end of the test: long polls return
	conns sync.WaitGroup

	mu       sync.Mutex
	produced map[int32][]Batch
	errs     []error
	seen     []string // "Name vN reason" of each request
}

// newFakeBroker's cleanup releases long polls, waits for the broker's
// connections to end (their clients' cleanups, registered later, run
// first) and reports what the broker refused.
func newFakeBroker(t *testing.T) *fakeBroker {
	fb := &fakeBroker{host: "fake", port: 9092, fetch: map[int32][]byte{}, hwm: map[int32]int64{},
		done: make(chan struct{}), produced: map[int32][]Batch{}}
	if err := fakeServed.Check(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(fb.done)
		fb.conns.Wait()
		for _, err := range fb.errs {
			t.Error(err)
		}
	})
	return fb
}

// client starts a kgo client on fb, over in-memory pipes.
func (fb *fakeBroker) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	opts = append([]kgo.Opt{kgo.SeedBrokers("fake:9092"), kgo.Dialer(fb.dial), kgo.FetchMaxWait(time.Second)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (fb *fakeBroker) dial(_ context.Context, _, _ string) (net.Conn, error) {
	c, s := net.Pipe()
	fb.start(s)
	return c, nil
}

// start serves c in a goroutine of its own.
func (fb *fakeBroker) start(c net.Conn) {
	fb.conns.Add(1)
	go func() {
		defer fb.conns.Done()
		defer c.Close()
		fb.serve(c)
	}()
}

func (fb *fakeBroker) fail(err error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.errs = append(fb.errs, err)
}

// serve answers requests in order until the client goes away or sends
// something the broker does not serve.
func (fb *fakeBroker) serve(c net.Conn) {
	for {
		req, err := ReadServedRequest(c, 1<<20, fakeServed)
		if err != nil {
			return
		}
		fb.mu.Lock()
		fb.seen = append(fb.seen, fmt.Sprintf("%s v%d %v", kmsg.NameForKey(req.Key), req.Version, req.Unsupported))
		fb.mu.Unlock()
		var resp kmsg.Response
		if req.Body == nil {
			resp = UnsupportedVersionResponse(req, fakeServed)
		} else {
			resp = fb.handle(req)
		}
		if resp == nil {
			fb.fail(fmt.Errorf("unanswered %s v%d (%v)", kmsg.NameForKey(req.Key), req.Version, req.Unsupported))
			return
		}
		if _, err := c.Write(AppendResponse(nil, req.CorrelationID, resp)); err != nil {
			return
		}
	}
}

func (fb *fakeBroker) handle(req *Request) kmsg.Response {
	switch body := req.Body.(type) {
	case *kmsg.ApiVersionsRequest:
		return ApiVersionsResponse(req.Version, fakeServed)
	case *kmsg.MetadataRequest:
		return fb.metadata(body)
	case *kmsg.InitProducerIDRequest:
		resp := body.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = 7, 0
		return resp
	case *kmsg.ProduceRequest:
		return fb.produce(body)
	case *kmsg.ListOffsetsRequest:
		return fb.listOffsets(body)
	case *kmsg.FetchRequest:
		return fb.fetchResponse(body)
	}
	return nil
}

func (fb *fakeBroker) metadata(req *kmsg.MetadataRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = 1, fb.host, fb.port
	resp.Brokers, resp.ControllerID, resp.ClusterID = []kmsg.MetadataResponseBroker{b}, 1, kmsg.StringPtr("fake")
	t := kmsg.NewMetadataResponseTopic()
	t.Topic = kmsg.StringPtr(fakeTopic)
	for p := range int32(len(codecs)) {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.LeaderEpoch, mp.Replicas, mp.ISR = p, 1, -1, []int32{1}, []int32{1}
		t.Partitions = append(t.Partitions, mp)
	}
	resp.Topics = []kmsg.MetadataResponseTopic{t}
	return resp
}

func (fb *fakeBroker) produce(req *kmsg.ProduceRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		t := kmsg.NewProduceResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewProduceResponseTopicPartition()
			p.Partition = rp.Partition
			batches, err := DecodeBatches(rp.Records, Limits{})
			for i := 0; err == nil && i < len(batches); i++ {
				err = ValidateProduce(&batches[i])
			}
			if err != nil {
				fb.fail(err)
				p.ErrorCode = CodeFor(err)
			} else {
				p.BaseOffset = fb.record(rp.Partition, batches)
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// record keeps produced batches and returns the first one's offset.
func (fb *fakeBroker) record(p int32, batches []Batch) int64 {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	n := 0
	for _, b := range fb.produced[p] {
		n += len(b.Records)
	}
	fb.produced[p] = append(fb.produced[p], batches...)
	return int64(n)
}

func (fb *fakeBroker) listOffsets(req *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition, p.Offset, p.LeaderEpoch = rp.Partition, 0, -1
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// fetchResponse answers partitions fetched at offset 0 with their batch;
// with nothing to return it holds the request until the test ends.
func (fb *fakeBroker) fetchResponse(req *kmsg.FetchRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	ready := false
	for _, rt := range req.Topics {
		t := kmsg.NewFetchResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewFetchResponseTopicPartition()
			p.Partition, p.HighWatermark, p.LastStableOffset = rp.Partition, fb.hwm[rp.Partition], fb.hwm[rp.Partition]
			if rp.FetchOffset == 0 {
				p.RecordBatches = fb.fetch[rp.Partition]
				ready = true
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	if !ready {
		<-fb.done
	}
	return resp
}

// consumeSpec is partition p's batch: offset gaps, null and empty keys and
// values, headers, and values that compress.
func consumeSpec(p int) BatchSpec {
	s := sampleSpec(codecs[p])
	s.BaseOffset, s.PartitionLeaderEpoch = 0, -1
	return s
}

// TestKgoConsumesAppendBatch: kgo fetches one batch per codec, encoded by
// AppendBatch, and reads back every record as it was.
func TestKgoConsumesAppendBatch(t *testing.T) {
	fb := newFakeBroker(t)
	offsets := map[int32]kgo.Offset{}
	for p := range codecs {
		spec := consumeSpec(p)
		b, err := AppendBatch(nil, spec)
		if err != nil {
			t.Fatal(err)
		}
		fb.fetch[int32(p)], fb.hwm[int32(p)] = b, int64(spec.Records[len(spec.Records)-1].OffsetDelta)+1
		offsets[int32(p)] = kgo.NewOffset().At(0)
	}
	cl := fb.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{fakeTopic: offsets}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[int32][]*kgo.Record{}
	for n := 0; n < len(codecs)*len(consumeSpec(0).Records); {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got[r.Partition] = append(got[r.Partition], r); n++ })
	}
	for p := range codecs {
		checkConsumed(t, p, got[int32(p)], consumeSpec(p))
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if len(fb.seen) < 2 || fb.seen[0] != "ApiVersions v5 not served" || fb.seen[1] != "ApiVersions v3 decoded" {
		t.Fatalf("no KIP-511 downgrade: %q", fb.seen)
	}
}

func checkConsumed(t *testing.T, p int, got []*kgo.Record, spec BatchSpec) {
	if len(got) != len(spec.Records) {
		t.Fatalf("partition %d: %d records", p, len(got))
	}
	for i, r := range got {
		w := spec.Records[i]
		var hs []Header
		for _, h := range r.Headers {
			hs = append(hs, Header{Key: h.Key, Value: h.Value})
		}
		if r.Offset != int64(w.OffsetDelta) || r.Timestamp.UnixMilli() != w.Timestamp || !reflect.DeepEqual(r.Key, w.Key) ||
			!reflect.DeepEqual(r.Value, w.Value) || !reflect.DeepEqual(hs, w.Headers) ||
			Codec(r.Attrs.CompressionType()) != spec.Compression {
			t.Fatalf("partition %d (%s) record %d: %+v", p, spec.Compression, i, r)
		}
	}
}

// TestDecodeKgoProducedBatches: kgo produces with every codec (and once
// idempotently); DecodeBatches reads each batch back, ValidateProduce
// accepts it, and every record arrives as sent.
func TestDecodeKgoProducedBatches(t *testing.T) {
	kgoCodecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(),
		kgo.Lz4Compression(), kgo.ZstdCompression()}
	for p, codec := range kgoCodecs {
		t.Run(codecs[p].String(), func(t *testing.T) {
			fb := newFakeBroker(t)
			opts := []kgo.Opt{kgo.DefaultProduceTopic(fakeTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.ProducerBatchCompression(codec)}
			if codecs[p] != Zstd {
				opts = append(opts, kgo.DisableIdempotentWrite())
			}
			cl := fb.client(t, opts...)
			sent := produceSome(t, cl, int32(p))
			fb.mu.Lock()
			defer fb.mu.Unlock()
			checkProduced(t, fb.produced[int32(p)], sent, codecs[p])
		})
	}
}

func produceSome(t *testing.T, cl *kgo.Client, p int32) []*kgo.Record {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sent []*kgo.Record
	for i := range 20 {
		r := &kgo.Record{Partition: p, Key: []byte(fmt.Sprintf("key-%d", i)),
			Value:     bytes.Repeat([]byte(fmt.Sprintf("value %d ", i)), 30),
			Headers:   []kgo.RecordHeader{{Key: "n", Value: []byte{byte(i)}}},
			Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))}
		if i == 3 {
			r.Key = nil
		}
		sent = append(sent, r)
	}
	if err := cl.ProduceSync(ctx, sent...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return sent
}

func checkProduced(t *testing.T, batches []Batch, sent []*kgo.Record, c Codec) {
	var got []Record
	for _, b := range batches {
		if b.Compression != c {
			t.Fatalf("batch compressed with %s, want %s", b.Compression, c)
		}
		if (c == Zstd) != (b.ProducerID == 7) {
			t.Fatalf("%s: producer id %d", c, b.ProducerID)
		}
		got = append(got, b.Records...)
	}
	if len(got) != len(sent) {
		t.Fatalf("%d records decoded, %d sent", len(got), len(sent))
	}
	for i, r := range got {
		s := sent[i]
		if !reflect.DeepEqual(r.Key, s.Key) || !bytes.Equal(r.Value, s.Value) || r.Timestamp != s.Timestamp.UnixMilli() ||
			len(r.Headers) != 1 || r.Headers[0].Key != "n" || !bytes.Equal(r.Headers[0].Value, s.Headers[0].Value) {
			t.Fatalf("record %d: %+v, sent %+v", i, r, s)
		}
	}
}
