package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestKgoSeekByTimestamp: two batches produced with a pause between them;
// a consumer reset to the pause (ListOffsets by timestamp, Kafka offsets
// being time) reads all of the second batch and none of the first.
func TestKgoSeekByTimestamp(t *testing.T) {
	_, _, addr := startKafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := kgoClient(t, addr, kgo.DefaultProduceTopic("orders"))
	const n = 200
	first := produceAll(ctx, t, prod, "before", n)
	// The pause: the seek time lies 10 ms after the first batch's last ack
	// and 10 ms before the second batch's first send, far more than the
	// writers' clock correction can move an offset on one machine.
	acked := time.Now()
	testkit.WaitFor(t, "the clock to pass the pause", func() bool { return time.Since(acked) > 20*time.Millisecond })
	at := acked.Add(10 * time.Millisecond).UnixMilli()
	second := produceAll(ctx, t, prod, "after", n)
	if first.hi >= at*1e6 || second.lo < at*1e6 {
		t.Fatalf("offsets do not follow the clock: first batch up to %d, second from %d, pause at %d ms", first.hi, second.lo, at)
	}
	cons := kgoClient(t, addr, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(at)))
	got := map[string]bool{}
	for len(got) < n && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if v := string(r.Value); !strings.HasPrefix(v, "after-") {
				t.Fatalf("read %s (offset %d) of the first batch after seeking to %d ms", v, r.Offset, at)
			}
			got[string(r.Value)] = true
		})
	}
	if len(got) != n {
		t.Fatalf("read %d of the second batch's %d records", len(got), n)
	}
}

// offsetRange is the lowest and highest Kafka offset a batch was acked at.
type offsetRange struct{ lo, hi int64 }

// produceAll produces n records "<prefix>-<i>" and waits for every ack.
func produceAll(ctx context.Context, t *testing.T, cl *kgo.Client, prefix string, n int) offsetRange {
	t.Helper()
	var mu sync.Mutex
	r := offsetRange{lo: -1, hi: -1}
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "%s-%d", prefix, i)},
			func(rec *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce %s: %v", rec.Value, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if r.lo < 0 || rec.Offset < r.lo {
					r.lo = rec.Offset
				}
				r.hi = max(r.hi, rec.Offset)
			})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	mu.Lock()
	defer mu.Unlock()
	return r
}

// TestFetchNewSessionNotAtEnd: the first fetch of a new read session
// (a new connection: kcat -C -e starting at the beginning) must not report
// a partition that holds records as ending where it starts: librdkafka
// takes an empty answer at the high watermark for the end of the
// partition, and kcat -e exits without printing it.
func TestFetchNewSessionNotAtEnd(t *testing.T) {
	lc, c, addr := startKafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	from := time.Now().Add(-time.Minute)
	prod := kgoClient(t, addr, kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 30 {
		rec := &kgo.Record{Partition: int32(i % 3), Value: fmt.Appendf(nil, "v%d", i)}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	readNative(ctx, t, c, from, 30) // every record is readable now
	start := logStart(ctx, t, prod)
	for try := range 20 {
		cl := kgoClient(t, addr) // a new connection: new sessions
		resp, err := fetchAll(start).RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range resp.Topics[0].Partitions {
			if p.ErrorCode == 0 && len(p.RecordBatches) == 0 && p.HighWatermark <= start {
				t.Fatalf("try %d: partition %d holds records, but a new session's first fetch at %d answers none with high watermark %d (gateway %s)",
					try, p.Partition, start, p.HighWatermark, lc.Kafka().Advertised())
			}
		}
		cl.Close()
	}
}

// readNative reads n records of topic "orders" from the time from on
// through the Go API.
func readNative(ctx context.Context, t *testing.T, c *raidq.Client, from time.Time, n int) {
	t.Helper()
	cn, err := c.Consumer("orders", raidq.WithStart(from))
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	for i := range n {
		if _, err := cn.Next(ctx); err != nil {
			t.Fatalf("native read %d: %v", i, err)
		}
	}
}

// logStart is the earliest offset (ListOffsets -2) of orders/0.
func logStart(ctx context.Context, t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "orders"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, -2
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("ListOffsets earliest: %v %+v", err, resp)
	}
	return resp.Topics[0].Partitions[0].Offset
}

// fetchAll is a Fetch of orders' three partitions at off, as librdkafka
// sends it (MinBytes 1, MaxWait 500 ms).
func fetchAll(off int64) *kmsg.FetchRequest {
	f := kmsg.NewPtrFetchRequest()
	f.Version, f.MaxWaitMillis, f.MinBytes, f.MaxBytes = 11, 500, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "orders"
	for p := range int32(3) {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p, off, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
	}
	f.Topics = append(f.Topics, ft)
	return f
}
