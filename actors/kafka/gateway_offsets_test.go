package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceAsync writes n records with values prefix-i through cl without
// waiting between them and returns the offset each produce response
// gave, by value.
func produceAsync(ctx context.Context, t *testing.T, cl *kgo.Client, prefix string, n int) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	acked := map[string]int64{}
	for i := range n {
		v := fmt.Sprintf("%s-%d", prefix, i)
		cl.Produce(ctx, &kgo.Record{Topic: "orders", Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce %s: %v", r.Value, err)
				return
			}
			mu.Lock()
			acked[string(r.Value)] = r.Offset
			mu.Unlock()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return acked
}

// consumedAt reads every partition of orders from the start until it has
// seen every value of want, and returns the offset each was read at.
func consumedAt(ctx context.Context, t *testing.T, addr string, want map[string]int64) map[string]int64 {
	t.Helper()
	cl := kgoClient(t, addr, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	got := map[string]int64{}
	for len(got) < len(want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(got), len(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if prev, dup := got[string(r.Value)]; dup {
				t.Errorf("%s read twice, at %d and %d", r.Value, prev, r.Offset)
			}
			got[string(r.Value)] = r.Offset
		})
	}
	return got
}

// asyncProducers runs producers concurrent asynchronous kgo producers
// (acks=all, five requests in flight, not idempotent, as a sarama
// AsyncProducer), n records each, and returns every record's acked
// offset by value.
func asyncProducers(ctx context.Context, t *testing.T, addr string, producers, n int, opts ...kgo.Opt) map[string]int64 {
	t.Helper()
	acked := map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range producers {
		cl := kgoClient(t, addr, append([]kgo.Opt{kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5),
			kgo.RequiredAcks(kgo.AllISRAcks())}, opts...)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := produceAsync(ctx, t, cl, fmt.Sprint("p", p), n)
			mu.Lock()
			defer mu.Unlock()
			for v, off := range got {
				acked[v] = off
			}
		}()
	}
	wg.Wait()
	return acked
}

// TestProduceOffsetIsConsumedOffset: with batches of at most the grid's
// records (one stripe each), every record is read at the offset its
// produce response gave, under concurrent asynchronous producers with
// several requests in flight.
func TestProduceOffsetIsConsumedOffset(t *testing.T) {
	_, _, addr := startKafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// 16 KiB batches of these records hold fewer than 1024.
	acked := asyncProducers(ctx, t, addr, 4, 4000, kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(16<<10))
	if t.Failed() {
		return
	}
	readWhereAcked(ctx, t, addr, acked)
}

// readWhereAcked fails t unless every record of acked is read at the
// offset its produce response gave.
func readWhereAcked(ctx context.Context, t *testing.T, addr string, acked map[string]int64) {
	t.Helper()
	moved := 0
	for v, off := range consumedAt(ctx, t, addr, acked) {
		if off != acked[v] {
			if moved++; moved <= 5 {
				t.Errorf("%s: produce response said offset %d, read at %d (%+d)", v, acked[v], off, off-acked[v])
			}
		}
	}
	if moved > 0 {
		t.Fatalf("%d of %d records read at another offset than acked", moved, len(acked))
	}
}

// TestProduceOffsetCutBatches: a batch of more records than the grid
// (1024) is cut into stripes, and Kafka's answer has one base offset per
// batch. The stripes are written as one run on consecutive grid cells
// (Producer.SendBatches), so every record is read at base + its index in
// the batch, as acked. Before, each stripe took its own cell and records
// past the first 1024 of a batch moved (9952 of 12000 here; the 128 of a
// sarama AsyncProducer's 1152-record batch).
func TestProduceOffsetCutBatches(t *testing.T) {
	_, _, addr := startKafka(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A long linger and 1 MB batches: thousands of records per batch.
	acked := asyncProducers(ctx, t, addr, 2, 6000, kgo.ProducerLinger(50*time.Millisecond))
	if t.Failed() {
		return
	}
	cut := 0 // records past the first 1024 of their batch: the ones that moved
	byOffset := map[int64]bool{}
	for _, off := range acked {
		byOffset[off] = true
	}
	for _, off := range acked {
		if byOffset[off-1024] {
			cut++
		}
	}
	readWhereAcked(ctx, t, addr, acked)
	if cut == 0 {
		t.Logf("no batch held more than 1024 records: the cut was not exercised")
	}
	t.Logf("%d records, %d of them past the first 1024 of a cut batch, all read where acked", len(acked), cut)
}
