package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/kafka"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/scenarios/testkit"
)

// listLatest asks the gateway cl was seeded with (not whichever broker
// the client's metadata names) for ListOffsets latest of orders' first
// parts partitions; an error code fails the test.
func listLatest(ctx context.Context, t *testing.T, cl *kgo.Client, parts int) []int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "orders"
	for p := range int32(parts) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	kr, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatalf("ListOffsets latest: %v", err)
	}
	resp := kr.(*kmsg.ListOffsetsResponse)
	out := make([]int64, parts)
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != 0 {
			t.Fatalf("ListOffsets latest, partition %d: error %d", p.Partition, p.ErrorCode)
		}
		out[p.Partition] = p.Offset
	}
	return out
}

// produceTo writes n records to partition p synchronously and returns
// their values.
func produceTo(ctx context.Context, t *testing.T, cl *kgo.Client, p int32, prefix string, n int) []string {
	t.Helper()
	var vals []string
	for i := range n {
		v := fmt.Sprintf("%s-%d-%d", prefix, p, i)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
		vals = append(vals, v)
	}
	return vals
}

// readFrom reads partition p from offset off until it has seen every
// value of want, and returns the offset after the last record read.
func readFrom(ctx context.Context, t *testing.T, addr string, p int32, off int64, want []string) int64 {
	t.Helper()
	cl := kgoClient(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {p: kgo.NewOffset().At(off)}}))
	defer cl.Close()
	missing := map[string]bool{}
	for _, v := range want {
		missing[v] = true
	}
	var next int64
	for len(missing) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("partition %d from %d: %d of %d records never read", p, off, len(missing), len(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			delete(missing, string(r.Value))
			next = max(next, r.Offset+1)
		})
	}
	return next
}

// TestTailCaughtUpGroupLagZero: a group that has read and committed
// every record of every partition has lag 0 (ListOffsets latest minus the
// committed offset, as kadm and kafka-consumer-groups compute it), not
// the time between its last record and the read frontier.
func TestTailCaughtUpGroupLagZero(t *testing.T) {
	_, _, addr := startKafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := kgoClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[string]bool{}
	for p := range int32(3) {
		for _, v := range produceTo(ctx, t, prod, p, "lag", 20) {
			want[v] = true
		}
	}
	group := kgoClient(t, addr, kgo.ConsumerGroup("lag0"), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	for len(want) > 0 {
		fs := group.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group never read %d records", len(want))
		}
		fs.EachRecord(func(r *kgo.Record) { delete(want, string(r.Value)) })
	}
	if err := group.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	committed := groupOffsets(ctx, t, group, "lag0", 3)
	admin := kgoClient(t, addr)
	for round := range 2 { // a second ask comes from the cache or a new search: the same
		latest := listLatest(ctx, t, admin, 3)
		for p := range 3 {
			if lag := latest[p] - committed[p]; lag != 0 {
				t.Fatalf("round %d, partition %d: latest %d, committed %d: lag %d, want 0", round, p, latest[p], committed[p], lag)
			}
		}
	}
}

// groupOffsets is the group's committed offset of each of orders' first
// parts partitions (OffsetFetch).
func groupOffsets(ctx context.Context, t *testing.T, cl *kgo.Client, group string, parts int) []int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = "orders"
	for p := range int32(parts) {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("OffsetFetch: %v %+v", err, resp)
	}
	out := make([]int64, parts)
	for _, p := range resp.Topics[0].Partitions {
		out[p.Partition] = p.Offset
	}
	return out
}

// TestTailLatestMissesNothing: ListOffsets latest is the offset after
// the last record (not a point in time past it), and a consumer starting
// there reads every record produced after the answer.
func TestTailLatestMissesNothing(t *testing.T) {
	_, _, addr := startKafka(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := kgoClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	before := produceTo(ctx, t, prod, 0, "before", 10)
	end := readFrom(ctx, t, addr, 0, 0, before)
	admin := kgoClient(t, addr)
	latest := listLatest(ctx, t, admin, 1)[0]
	if latest != end {
		t.Fatalf("latest %d, want %d: the offset after the last record", latest, end)
	}
	after := produceTo(ctx, t, prod, 0, "after", 10)
	readFrom(ctx, t, addr, 0, latest, after)
}

// TestTailAfterQuiet: a gateway that never served a partition finds its
// last record several owner ranges (seconds) below the read frontier, by
// probing the nodes' stores rather than reading from the start.
func TestTailAfterQuiet(t *testing.T) {
	lc, _, addr := startKafka(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := kgoClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	end := readFrom(ctx, t, addr, 0, 0, produceTo(ctx, t, prod, 0, "q", 5))
	// The quiet period itself is what is tested: let now - D pass three
	// owner ranges above the last record.
	quiet := time.Unix(0, end).Add(3*time.Second + raidq.DefaultParams().ReadDelay)
	select {
	case <-time.After(time.Until(quiet)):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	addr2 := startSecondGateway(t, lc)
	waitTopicServed(ctx, t, addr2, "orders")
	if got := listLatest(ctx, t, kgoClient(t, addr2), 1)[0]; got != end {
		t.Fatalf("a new gateway answers latest %d, want %d: the offset after the last record", got, end)
	}
}

// TestTailHighWatermarkTwoGateways: while records arrive, the high
// watermark a consumer sees never decreases, across fetches and across
// new read sessions; once they stop it equals ListOffsets latest on two
// gateways of one cluster, and the offset after the last record.
func TestTailHighWatermarkTwoGateways(t *testing.T) {
	lc, _, addr1 := startKafka(t, 1)
	addr2 := startSecondGateway(t, lc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitTopicServed(ctx, t, addr2, "orders")
	prod := kgoClient(t, addr1, kgo.DefaultProduceTopic("orders"))
	done := make(chan []string, 1)
	go func() {
		var vals []string
		for i := range 40 {
			v := fmt.Sprint("w", i)
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte(v)}).FirstErr(); err != nil {
				t.Errorf("produce %s: %v", v, err)
				break
			}
			vals = append(vals, v)
		}
		done <- vals
	}()
	last := map[string]int64{} // per gateway: each answers from its own view
	hw := func(addr string, cl *kgo.Client, off int64) (int64, int64) {
		f := fetchAll(off)
		f.Topics[0].Partitions = f.Topics[0].Partitions[:1]
		kr, err := cl.SeedBrokers()[0].Request(ctx, f)
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		rp := kr.(*kmsg.FetchResponse).Topics[0].Partitions[0]
		if rp.ErrorCode != 0 {
			t.Fatalf("fetch at %d: error %d", off, rp.ErrorCode)
		}
		if prev, ok := last[addr]; ok && rp.HighWatermark < prev {
			t.Fatalf("gateway %s: the high watermark went from %d to %d", addr, prev, rp.HighWatermark)
		}
		last[addr] = rp.HighWatermark
		return rp.HighWatermark, max(off, nextOffset(t, rp.RecordBatches))
	}
	var vals []string
	for vals == nil {
		for _, addr := range []string{addr1, addr2} {
			cl := kgoClient(t, addr) // a new connection: a new read session from the start
			_, next := hw(addr, cl, 0)
			for range 3 {
				_, next = hw(addr, cl, next)
			}
			cl.Close()
		}
		select {
		case vals = <-done:
		default:
		}
	}
	if t.Failed() {
		return
	}
	end := readFrom(ctx, t, addr1, 0, 0, vals)
	cl1, cl2 := kgoClient(t, addr1), kgoClient(t, addr2)
	l1, l2 := listLatest(ctx, t, cl1, 1)[0], listLatest(ctx, t, cl2, 1)[0]
	h1, _ := hw(addr1, cl1, end)
	h2, _ := hw(addr2, cl2, end)
	if l1 != end || l2 != end || h1 != end || h2 != end {
		t.Fatalf("after the last record (offset %d): latest %d and %d, high watermarks %d and %d on the two gateways", end-1, l1, l2, h1, h2)
	}
}

// nextOffset is the offset after the last record of a fetch's batches
// (0: none).
func nextOffset(t *testing.T, batches []byte) int64 {
	t.Helper()
	var next int64
	for len(batches) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(batches); err != nil {
			t.Fatalf("fetched batch: %v", err)
		}
		next = max(next, b.FirstOffset+int64(b.LastOffsetDelta)+1)
		batches = batches[12+int(b.Length):]
	}
	return next
}

// startSecondGateway starts another gateway on lc's cluster, with users
// (nil: no authentication).
func startSecondGateway(t *testing.T, lc *server.LocalCluster, users ...kafka.Authorizer) string {
	t.Helper()
	c, err := lc.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := kafka.Config{Client: c, Meta: lc.Meta(), Cluster: "local", Listen: "127.0.0.1:0", ID: "second",
		BrokerID: -1, Logger: testkit.Logger(t, 0)}
	if len(users) > 0 {
		cfg.Users = users[0]
	}
	gw, err := kafka.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	return gw.Advertised()
}
