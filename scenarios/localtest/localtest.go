// Package localtest starts in-process raidq clusters for tests (the
// root package's, actors/server's and the CLI's): a cluster, a topic and
// a client in one call, each closed when the test ends.
package localtest

import (
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/stripe/quorum"
)

// Start starts an in-process cluster from cfg (in a test directory when
// cfg.Dir is empty), creates the topic "orders" with the given partitions
// and default parameters, and connects a client.
func Start(t testing.TB, cfg server.LocalClusterConfig, partitions int) (*server.LocalCluster, *raidq.Client) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	lc, err := server.StartLocalCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	if err := lc.CreateTopic("orders", partitions, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	c, err := lc.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return lc, c
}

// ReadN consumes n messages of topic with opts and fails the test if they
// do not all arrive within 20 s.
func ReadN(t testing.TB, c *raidq.Client, topic string, n int, opts ...raidq.ConsumerOption) {
	t.Helper()
	cons, err := c.Consumer(topic, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	timeout := time.After(20 * time.Second)
	for got := 0; got < n; got++ {
		select {
		case <-cons.Messages():
		case <-timeout:
			t.Fatalf("%s: %d of %d messages", topic, got, n)
		}
	}
}
