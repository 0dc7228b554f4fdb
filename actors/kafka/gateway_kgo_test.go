package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/scenarios/testkit"
)

// startKafka starts a local cluster with a gateway on a free port and a
// topic "orders" of the given partitions.
func startKafka(t *testing.T, partitions int) (*server.LocalCluster, *raidq.Client, string) {
	t.Helper()
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), NoSync: true,
		Logger: testkit.Logger(t, slog.LevelInfo), Kafka: &server.KafkaOptions{Listen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	c, err := lc.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CreateTopic(ctx, raidq.TopicConfig{Name: "orders", Partitions: partitions, Params: raidq.DefaultParams()}); err != nil {
		t.Fatal(err)
	}
	addr := lc.Kafka().Advertised()
	waitTopicServed(ctx, t, addr, "orders")
	return lc, c, addr
}

// waitTopicServed waits until the gateway at addr answers Metadata for
// topic without an error: its catalog learns a new topic from the
// metadata watch a moment after CreateTopic returns, and a raw request
// (unlike a kgo client) does not retry UNKNOWN_TOPIC_OR_PARTITION.
func waitTopicServed(ctx context.Context, t *testing.T, addr, topic string) {
	t.Helper()
	cl := kgoClient(t, addr)
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gateway never served topic %s: %v", topic, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func kgoClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestKgoProduceConsume(t *testing.T) {
	_, c, addr := startKafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := kgoClient(t, addr, kgo.DefaultProduceTopic("orders"))
	const n = 300
	for i := 0; i < n; i++ {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%7)), Value: []byte(fmt.Sprintf("v%d", i)),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
		prod.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons := kgoClient(t, addr, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]bool{}
	for len(got) < n && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Headers) != 1 || r.Headers[0].Key != "h" {
				t.Errorf("record %s: headers %v", r.Value, r.Headers)
			}
			got[string(r.Value)] = true
		})
	}
	if len(got) != n {
		t.Fatalf("consumed %d of %d", len(got), n)
	}
	t.Logf("kgo consumed %d records", n)
	// The native API reads the same records.
	cn, err := c.Consumer("orders", raidq.WithStart(time.Now().Add(-time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	native := 0
	for native < n {
		m, err := cn.Next(ctx)
		if err != nil {
			t.Fatalf("native read %d: %v", native, err)
		}
		if m.Time.IsZero() {
			t.Fatalf("native read of a Kafka record has no timestamp")
		}
		native++
	}
}

// TestKgoGroupRebalance: three kgo group members share the partitions;
// one leaves; every record produced is read by the group.
func TestKgoGroupRebalance(t *testing.T) {
	_, _, addr := startKafka(t, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := make(chan string, 10000)
	member := func(name string) *kgo.Client {
		return kgoClient(t, addr, kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("orders"), kgo.ClientID(name),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.SessionTimeout(6*time.Second), kgo.AutoCommitInterval(200*time.Millisecond))
	}
	poll := func(cl *kgo.Client, stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) { seen <- string(r.Value) })
		}
	}
	members := []*kgo.Client{member("m0"), member("m1"), member("m2")}
	stops := make([]chan struct{}, len(members))
	for i, m := range members {
		stops[i] = make(chan struct{})
		go poll(m, stops[i])
	}
	prod := kgoClient(t, addr, kgo.DefaultProduceTopic("orders"))
	const n = 600
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	got := map[string]bool{}
	collect := func(want int) {
		for len(got) < want {
			select {
			case v := <-seen:
				got[v] = true
			case <-ctx.Done():
				t.Fatalf("group read %d of %d", len(got), want)
			}
		}
	}
	produce(0, n/2)
	collect(n / 2)
	close(stops[2])
	members[2].Close() // leaves the group: a rebalance
	produce(n/2, n)
	collect(n)
	close(stops[0])
	close(stops[1])
}
