package raidq_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/raidq/raidq"
)

// ExampleConsumer_Next produces two messages into an in-process cluster and
// reads them back from the start with Next.
func ExampleConsumer_Next() {
	dir, _ := os.MkdirTemp("", "raidq-example-")
	defer os.RemoveAll(dir)
	lc, err := raidq.StartLocalCluster(raidq.LocalClusterConfig{Dir: dir, NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lc.Close()
	_ = lc.CreateTopic("orders", 1, raidq.DefaultParams())
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
	_ = p.Close(ctx)

	cons, _ := c.Consumer("orders", raidq.ConsumerOptions{From: time.Unix(0, 1)}) // earliest
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
