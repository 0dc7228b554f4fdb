package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// miniCluster is six in-process nodes (MemStore each) behind one NATS
// server, and a client, all on the real clock.
type miniCluster struct {
	t      *testing.T
	log    *slog.Logger
	srv    *natsserver.Server
	cat    *meta.StaticCatalog
	ids    []string
	nodes  []*Node
	stores []*slotstore.MemStore
	client *actors.Client
}

func newMiniCluster(t *testing.T, n int) *miniCluster {
	t.Helper()
	c := &miniCluster{t: t, log: testkit.Logger(t, slog.LevelWarn), cat: meta.NewStaticCatalog()}
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	c.srv = srv
	t.Cleanup(srv.Shutdown)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i)
		store := slotstore.NewMem(slotstore.Options{Logger: c.log})
		t.Cleanup(func() { _ = store.Close() })
		nc, err := srv.Connect("node-" + id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		node, err := Start(Config{ID: id, Cluster: testCluster, Store: store, Conn: nc, Catalog: c.cat, Logger: c.log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = node.Stop(ctx)
		})
		if err := nc.Flush(); err != nil { // the node's subscription is live
			t.Fatal(err)
		}
		c.ids, c.nodes, c.stores = append(c.ids, id), append(c.nodes, node), append(c.stores, store)
	}
	cnc, err := srv.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	if c.client, err = actors.NewClient(actors.ClientConfig{Cluster: testCluster, Conn: cnc, Catalog: c.cat, Logger: c.log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.client.Close)
	return c
}

// createTopic adds a topic created now (after every node's store was born).
func (c *miniCluster) createTopic(name string, partitions int) *meta.Topic {
	c.t.Helper()
	ens, err := meta.Ensembles(name, partitions, 6, c.ids)
	if err != nil {
		c.t.Fatal(err)
	}
	tp := &meta.Topic{Name: name, Partitions: partitions, Params: quorum.Default(), Ensembles: ens, Created: uint64(time.Now().UnixNano())}
	mustPut(c.t, c.cat, tp)
	return tp
}

// sendAll sends values on p, spreading them over partitions, and returns
// each value's result once every callback has run.
func sendAll(t *testing.T, p *actors.Producer, partitions int, values []string) map[string]actors.SendResult {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := make(map[string]actors.SendResult, len(values))
	for i, v := range values {
		wg.Add(1)
		p.Send(stripe.Record{Key: []byte(v), Value: []byte(v)}, i%partitions, func(r actors.SendResult) {
			mu.Lock()
			out[v] = r
			mu.Unlock()
			wg.Done()
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	return out
}

func values(from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("rec-%04d", i))
	}
	return out
}

// quiesce waits until every slot any live node holds in tp is held by
// every live node: all shards sent so far have landed (one producer, no
// conflicts, so every attempt went to all of them). docs/design.md#the-arithmetic: a stripe
// survives n-k losses only once its remaining shards have landed.
func (c *miniCluster) quiesce(tp *meta.Topic, live []int) {
	c.t.Helper()
	offsets := func(i, part int) map[uint64]bool {
		out := make(map[uint64]bool)
		err := c.stores[i].Scan(tp.Name, uint32(part), 0, ^uint64(0), func(off uint64, _ []byte) bool {
			out[off] = true
			return true
		})
		if err != nil {
			c.t.Fatal(err)
		}
		return out
	}
	testkit.WaitFor(c.t, "every shard to land", func() bool {
		for part := 0; part < tp.Partitions; part++ {
			ref := offsets(live[0], part)
			if len(ref) == 0 {
				return false
			}
			for _, i := range live[1:] {
				if !maps.Equal(ref, offsets(i, part)) {
					return false
				}
			}
		}
		return true
	})
}

// collector gathers a reader's deliveries.
type collector struct {
	mu      sync.Mutex
	count   map[string]int
	last    []core.Position // per partition: last position delivered
	started []bool
	order   []string // order problems
	total   int
	target  int
	done    chan struct{}
}

func newCollector(partitions, target int) *collector {
	return &collector{count: make(map[string]int), last: make([]core.Position, partitions), started: make([]bool, partitions), target: target, done: make(chan struct{})}
}

func (c *collector) sink(partition int) func([]core.Delivery) {
	return func(ds []core.Delivery) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, d := range ds {
			if c.started[partition] && !c.last[partition].Less(d.Pos) {
				c.order = append(c.order, fmt.Sprintf("partition %d: %s after %s", partition, d.Pos, c.last[partition]))
			}
			c.last[partition], c.started[partition] = d.Pos, true
			c.count[string(d.Record.Value)]++
			c.total++
			if c.total == c.target {
				close(c.done)
			}
		}
	}
}

// TestClientProduceAndRead: records produced through the client are all
// delivered once by the partition readers, with two of six nodes killed
// half-way; with three dead, sends fail saying which nodes did not answer.
func TestClientProduceAndRead(t *testing.T) {
	c := newMiniCluster(t, 6)
	const partitions = 2
	tp := c.createTopic("events", partitions)
	p, err := c.client.NewProducer(actors.ProducerConfig{Topic: tp.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	acked := make(map[string]actors.SendResult)
	check := func(res map[string]actors.SendResult, phase string) {
		t.Helper()
		for v, r := range res {
			if r.Err != nil {
				t.Errorf("%s: send %s: %v", phase, v, r.Err)
				continue
			}
			acked[v] = r
		}
	}
	check(sendAll(t, p, partitions, values(0, 250)), "all nodes up")
	c.quiesce(tp, []int{0, 1, 2, 3, 4, 5})
	killed := []int{1, 4}
	for _, i := range killed {
		c.nodes[i].Kill()
	}
	check(sendAll(t, p, partitions, values(250, 500)), "two nodes down")
	if len(acked) != 500 {
		t.Fatalf("%d of 500 sends acked with two of six nodes down", len(acked))
	}

	col := newCollector(partitions, len(acked))
	var readers []*actors.Reader
	for part := 0; part < partitions; part++ {
		r, err := c.client.NewReader(actors.ReaderConfig{Topic: tp.Name, Partition: part, Sink: col.sink(part)})
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	select {
	case <-col.done:
	case <-time.After(30 * time.Second):
	}
	for _, r := range readers {
		r.Close()
	}
	col.mu.Lock()
	if col.total < len(acked) {
		t.Errorf("delivered %d of %d acked records", col.total, len(acked))
	}
	for v, r := range acked {
		if n := col.count[v]; n != 1 {
			t.Errorf("acked %s (partition %d, %s) delivered %d times", v, r.Partition, r.Pos, n)
		}
	}
	for v := range col.count {
		if _, ok := acked[v]; !ok {
			t.Errorf("delivered %s, never acked", v)
		}
	}
	for _, o := range col.order {
		t.Errorf("out of order: %s", o)
	}
	col.mu.Unlock()

	// A third dead node leaves three of six: below W=4.
	c.nodes[2].Kill()
	killed = append(killed, 2)
	res := sendAll(t, p, partitions, values(500, 510))
	for v, r := range res {
		if r.Err == nil {
			t.Errorf("send %s acked with three of six nodes down", v)
			continue
		}
		if !errors.Is(r.Err, core.ErrNotEnoughNodes) {
			t.Errorf("send %s: %v; want ErrNotEnoughNodes", v, r.Err)
		}
		for _, i := range killed {
			if want := c.ids[i] + "=" + core.StatusNoReply.String(); !strings.Contains(r.Err.Error(), want) {
				t.Errorf("send %s: error %q does not name dead node %s (%s)", v, r.Err, c.ids[i], want)
			}
		}
	}
}

// TestProducerTicksOnlyWhileBusy: the attempt-timeout tick runs while a
// stripe is in flight and stops once every stripe is done, so an idle
// producer costs no wake-ups; the next send starts it again.
func TestProducerTicksOnlyWhileBusy(t *testing.T) {
	c := newMiniCluster(t, 6)
	tp := c.createTopic("quiet", 1)
	p, err := c.client.NewProducer(actors.ProducerConfig{Topic: tp.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	if p.Ticking() {
		t.Fatal("a new producer ticks before any send")
	}
	for round := range 2 {
		for _, st := range c.stores {
			st.Hold() // no commit, so no reply: the stripe stays in flight
		}
		results := make(chan actors.SendResult, 10)
		for _, v := range values(round*10, round*10+10) {
			p.Send(stripe.Record{Value: []byte(v)}, 0, func(r actors.SendResult) { results <- r })
		}
		testkit.WaitFor(t, "the tick to start with a stripe in flight", p.Ticking)
		for _, st := range c.stores {
			st.Release()
		}
		for range 10 {
			if r := <-results; r.Err != nil {
				t.Fatalf("round %d: %v", round, r.Err)
			}
		}
		// Acked stripes stay in the writer a while (listening for late
		// refusals); the tick must stop once they are done.
		testkit.WaitFor(t, "the tick to stop once no stripe is in flight", func() bool { return !p.Ticking() })
	}
}
