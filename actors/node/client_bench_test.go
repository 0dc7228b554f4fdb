package node

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// benchCluster is n in-process nodes behind one in-process NATS server
// and a client, on the real clock, for benchmarks.
type benchCluster struct {
	srv    *natsserver.Server
	cat    *meta.StaticCatalog
	ids    []string
	nodes  []*Node
	client *actors.Client
	cnc    *nats.Conn
	topic  *meta.Topic
	reg    *prometheus.Registry // the client's metrics
}

// newBenchCluster starts n nodes whose stores open makes (LevelDB with or
// without fsync, or MemStore) and a topic of one partition on them.
func newBenchCluster(b *testing.B, n int, open func(i int) slotstore.Store) *benchCluster {
	b.Helper()
	log := slog.New(slog.DiscardHandler)
	c := &benchCluster{cat: meta.NewStaticCatalog()}
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	c.srv = srv
	b.Cleanup(srv.Shutdown)
	for i := range n {
		id := fmt.Sprintf("n%d", i)
		store := open(i)
		b.Cleanup(func() { _ = store.Close() })
		nc, err := srv.Connect("node-" + id)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		node, err := Start(Config{ID: id, Cluster: testCluster, Store: store, Conn: nc, Catalog: c.cat, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = node.Stop(ctx)
		})
		c.ids, c.nodes = append(c.ids, id), append(c.nodes, node)
	}
	if c.cnc, err = srv.Connect("client"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.cnc.Close)
	c.reg = prometheus.NewRegistry()
	if c.client, err = actors.NewClient(actors.ClientConfig{Cluster: testCluster, Conn: c.cnc, Catalog: c.cat, Logger: log, Metrics: c.reg}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.client.Close)
	ens, err := meta.Ensembles("bench", 1, 6, c.ids)
	if err != nil {
		b.Fatal(err)
	}
	// Created before the stores were born is fine: they are all new.
	c.topic = &meta.Topic{Name: "bench", Partitions: 1, Params: quorum.Default(), Ensembles: ens, Created: uint64(time.Now().UnixNano())}
	if err := c.cat.Put(c.topic); err != nil {
		b.Fatal(err)
	}
	return c
}

func memStores(int) slotstore.Store { return slotstore.NewMem(slotstore.Options{}) }

func levelStores(b *testing.B, sync bool) func(int) slotstore.Store {
	return func(int) slotstore.Store {
		s, err := slotstore.Open(b.TempDir(), slotstore.Options{NoSync: !sync, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
}

// benchNodeWrite sends one write request (a 4 KiB shard: a quarter of a
// 16 x 1 KiB batch) to one node and waits for its OK, par requests at a
// time: the node's whole write path over NATS (decode, route, owner,
// group commit, reply).
func benchNodeWrite(b *testing.B, open func(int) slotstore.Store, par int) {
	c := newBenchCluster(b, 6, open)
	node := c.topic.Ensembles[0][0]
	subject := c.client.Subjects().Slot(node, "bench", 0)
	shards, err := stripe.Encode(stripe.ID{Producer: testProducer, Seq: 1}, 1, 6, 4, make([]byte, 16*1024))
	if err != nil {
		b.Fatal(err)
	}
	var last atomic.Uint64
	b.SetBytes(int64(len(shards[0].Data)))
	b.ReportAllocs()
	b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0))) // par goroutines in all
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			off := uint64(time.Now().UnixNano())
			for {
				l := last.Load()
				if off <= l {
					off = l + 1
				}
				if last.CompareAndSwap(l, off) {
					break
				}
			}
			// The same stripe at a fresh offset (as a retry would be).
			req := bus.WriteReq{Topic: "bench", Partition: 0, Offset: off, Shard: stripe.Reshard(shards[:1], off)[0].Marshal()}
			msg, err := c.cnc.Request(subject, req.Marshal(), 5*time.Second)
			if err != nil {
				b.Error(err)
				return
			}
			r, err := bus.DecodeWriteReply(msg.Data)
			if err != nil || r.Status != bus.StatusOK {
				b.Errorf("write: %v %v %s", err, r.Status, r.Detail)
				return
			}
		}
	})
}

func BenchmarkNodeWriteMem(b *testing.B)      { benchNodeWrite(b, memStores, 1) }
func BenchmarkNodeWriteMemPar16(b *testing.B) { benchNodeWrite(b, memStores, 16) }
func BenchmarkNodeWriteLevelDBSyncPar16(b *testing.B) {
	benchNodeWrite(b, levelStores(b, true), 16)
}

// benchProducerSend is the client write path end to end: Send of 1 KiB
// records through one producer to six in-process nodes, acked at 4 of
// 6, from par goroutines each waiting for its ack (the bench's
// synchronous publishers).
func benchProducerSend(b *testing.B, open func(int) slotstore.Store, par int) {
	for _, pipe := range []int{-1, 1, 2} {
		name := "linger-only"
		if pipe > 0 {
			name = fmt.Sprintf("pipeline=%d", pipe)
		}
		b.Run(name, func(b *testing.B) { benchProducerSendPipe(b, open, par, actors.ProducerConfig{Pipeline: pipe}) })
	}
}

func benchProducerSendPipe(b *testing.B, open func(int) slotstore.Store, par int, pc actors.ProducerConfig) {
	c := newBenchCluster(b, 6, open)
	pc.Topic = "bench"
	p, err := c.client.NewProducer(pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	val := make([]byte, 1024)
	b.SetBytes(int64(len(val)))
	b.ReportAllocs()
	b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0))) // par goroutines in all
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		done := make(chan actors.SendResult, 1)
		for pb.Next() {
			p.Send(stripe.Record{Value: val}, 0, func(r actors.SendResult) { done <- r })
			if r := <-done; r.Err != nil {
				b.Error(r.Err)
				return
			}
		}
	})
	b.StopTimer()
	if stripes, _, _ := metrics.Sum(c.reg, "raidq_producer_stripe_attempts_total", nil); stripes > 0 {
		b.ReportMetric(float64(b.N)/stripes, "records/stripe")
	}
}

func BenchmarkProducerSendMemPar16(b *testing.B) { benchProducerSend(b, memStores, 16) }
func BenchmarkProducerSendLevelDBSyncPar16(b *testing.B) {
	benchProducerSend(b, levelStores(b, true), 16)
}
