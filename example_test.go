package raidq_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/stripe/quorum"
)

// localCluster starts an in-process cluster of six nodes for an example
// (a real program connects with raidq.Connect to `raidq dev` or to
// `raidq node` processes). stop closes it and removes its data.
func localCluster() (lc *server.LocalCluster, stop func(), err error) {
	dir, err := os.MkdirTemp("", "raidq-example-")
	if err != nil {
		return nil, nil, err
	}
	lc, err = server.StartLocalCluster(server.LocalClusterConfig{Dir: dir, NoSync: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return lc, func() { _ = lc.Close(); os.RemoveAll(dir) }, nil
}

// ordersProducer starts a local cluster with a one-partition topic
// orders and returns a client and a producer of it; stop closes them all.
func ordersProducer() (c *raidq.Client, p *raidq.Producer, stop func(), err error) {
	lc, stopCluster, err := localCluster()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := lc.CreateTopic("orders", 1, quorum.Default()); err != nil {
		stopCluster()
		return nil, nil, nil, err
	}
	if c, err = lc.Connect(); err != nil {
		stopCluster()
		return nil, nil, nil, err
	}
	if p, err = c.Producer("orders"); err != nil {
		_ = c.Close()
		stopCluster()
		return nil, nil, nil, err
	}
	return c, p, func() { _ = p.Close(); _ = c.Close(); stopCluster() }, nil
}

// ExampleClient_CreateTopic creates a topic with the default coding: four
// data and two parity shards, committed at four of six nodes.
func ExampleClient_CreateTopic() {
	lc, stop, err := localCluster()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	c, err := lc.Connect() // elsewhere: raidq.Connect("nats://host1:4222,nats://host2:4222")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t, err := c.CreateTopic(ctx, raidq.TopicConfig{Name: "orders", Partitions: 3, Params: raidq.DefaultParams()})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d partitions, %d+%d shards, commit at %d\n", t.Name, t.Partitions, t.Params.K,
		t.Params.N-t.Params.K, t.Params.W)
	// Output:
	// orders: 3 partitions, 4+2 shards, commit at 4
}

// ExampleProducer_SendAsync sends without waiting for each message: the
// futures resolve once four of six nodes hold the stripe.
func ExampleProducer_SendAsync() {
	lc, stop, err := localCluster()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	_ = lc.CreateTopic("orders", 1, quorum.Default())
	c, _ := lc.Connect()
	defer c.Close()
	p, err := c.Producer("orders", raidq.WithLinger(5*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var futures []*raidq.SendFuture
	for i := range 3 {
		futures = append(futures, p.SendAsync(ctx, raidq.Message{Value: []byte(fmt.Sprint("order-", i))}))
	}
	for _, f := range futures {
		m, err := f.Wait(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(string(m.Value), "committed in partition", m.Partition)
	}
	// Output:
	// order-0 committed in partition 0
	// order-1 committed in partition 0
	// order-2 committed in partition 0
}

// ExampleProducer_SendBatch writes three messages as one stripe, as a
// Kafka gateway writes a record batch: they commit together, at
// consecutive indexes, each with its own Time. The retry under the same
// stripe id (WithStripe) is delivered once.
func ExampleProducer_SendBatch() {
	c, p, stop, err := ordersProducer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	created := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	var batch []raidq.Message
	for i := range 3 {
		batch = append(batch, raidq.Message{Value: []byte(fmt.Sprint("order-", i)), Time: created.Add(time.Duration(i) * time.Second)})
	}
	id := raidq.StripeID{Producer: [16]byte{'g', 'w'}, Seq: 1} // the gateway's own producer id, a sequence per batch
	for range 2 {                                              // a retry of the same batch
		pos, err := p.SendBatch(ctx, 0, batch, raidq.WithStripe(id))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("batch committed at index", pos.Index)
	}
	if _, err := p.Send(ctx, raidq.Message{Value: []byte("end")}); err != nil {
		fmt.Println(err)
		return
	}

	cons, _ := c.Consumer("orders", raidq.WithStart(time.Unix(0, 1))) // earliest
	defer cons.Close()
	for {
		m, err := cons.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if string(m.Value) == "end" {
			break
		}
		fmt.Println(m.Position.Index, string(m.Value), m.Time.UTC().Format(time.TimeOnly))
	}
	// Output:
	// batch committed at index 0
	// batch committed at index 0
	// 0 order-0 12:00:00
	// 1 order-1 12:00:01
	// 2 order-2 12:00:02
}

// ExampleProducer_SendBatches writes two full stripes (1024 messages
// each, the default grid) as one run: they land on consecutive offsets,
// so message i of the run is at the first offset + i, as a Kafka client
// numbers a batch.
func ExampleProducer_SendBatches() {
	_, p, stop, err := ordersProducer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var run []raidq.Batch
	for b := range 2 {
		var msgs []raidq.Message
		for i := range 1024 {
			msgs = append(msgs, raidq.Message{Value: []byte(fmt.Sprint(b*1024 + i))})
		}
		run = append(run, raidq.Batch{Messages: msgs})
	}
	pos, err := p.SendBatches(ctx, 0, run)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("second stripe at the first's offset +", pos[1].Offset-pos[0].Offset)
	// Output:
	// second stripe at the first's offset + 1024
}

// ExampleConsumer_Next produces two messages and reads them back from the
// start with Next.
func ExampleConsumer_Next() {
	lc, stop, err := localCluster()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	_ = lc.CreateTopic("orders", 1, quorum.Default())
	c, _ := lc.Connect()
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, _ := c.Producer("orders")
	for _, v := range []string{"hello", "world"} {
		if _, err := p.Send(ctx, raidq.Message{Value: []byte(v)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	_ = p.Close()

	cons, _ := c.Consumer("orders", raidq.WithStart(time.Unix(0, 1))) // earliest
	defer cons.Close()
	for range 2 {
		m, err := cons.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(string(m.Value))
	}
	// Output:
	// hello
	// world
}

// ExampleWithGroup reads as a member of a consumer group: the group's
// members share the partitions, and Commit records how far this one got,
// so a member that takes a partition over resumes after it.
func ExampleWithGroup() {
	lc, stop, err := localCluster()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	_ = lc.CreateTopic("orders", 2, quorum.Default())
	c, _ := lc.Connect()
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, _ := c.Producer("orders")
	for _, k := range []string{"a", "b", "c"} {
		if _, err := p.Send(ctx, raidq.Message{Key: []byte(k), Value: []byte("order " + k)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	_ = p.Close()

	cons, err := c.Consumer("orders", raidq.WithGroup("billing"), raidq.WithMember("billing-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < 3 {
		m, err := cons.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		seen[string(m.Value)] = true
		if err := cons.Commit(ctx, m); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println(len(seen), "orders billed; partitions", cons.Partitions())
	// Output:
	// 3 orders billed; partitions [0 1]
}
