package fanout

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/node"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/syndtr/goleveldb/leveldb.(*DB).mpoolDrain"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	)
}

const (
	cluster = "fo"
	topic   = "orders"
)

// env is an in-process cluster: NATS with JetStream, the metadata store,
// six nodes on in-memory slot stores, and a topic created in the KV and
// watched into a catalog.
type env struct {
	t     *testing.T
	log   *slog.Logger
	srv   *natsserver.Server
	meta  *meta.Store
	cat   *meta.WatchedCatalog
	nodes []string
}

func newEnv(t *testing.T, partitions int) *env {
	t.Helper()
	e := &env{t: t, log: testkit.Logger(t, slog.LevelWarn)}
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true, JetStream: true, StoreDir: t.TempDir(),
		MaxMemory: 16 << 20, MaxStore: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	t.Cleanup(srv.Shutdown)
	nc := e.conn("meta")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e.meta, err = meta.Open(ctx, nc, cluster, meta.Options{Create: true, Logger: e.log}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("n%d", i)
		e.nodes = append(e.nodes, id)
		if err := e.meta.PutMember(ctx, meta.Member{ID: id, Heartbeat: now.UnixNano()}); err != nil {
			t.Fatal(err)
		}
	}
	// Stores are born before the topic, so no node answers "unknown".
	stores := make([]*slotstore.MemStore, 6)
	for i := range stores {
		stores[i] = slotstore.NewMem(slotstore.Options{Logger: e.log})
		st := stores[i]
		t.Cleanup(func() { _ = st.Close() })
	}
	if e.cat, err = e.meta.WatchCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.cat.Close)
	if _, err := e.meta.CreateTopic(ctx, meta.TopicSpec{Name: topic, Partitions: partitions, Params: quorum.Default()}, time.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "topic in the watched catalog", func() bool { _, err := e.cat.Topic(topic); return err == nil })
	for i, id := range e.nodes {
		n, err := node.Start(node.Config{ID: id, Cluster: cluster, Store: stores[i], Conn: e.conn("node-" + id),
			Catalog: e.cat, Logger: e.log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = n.Stop(ctx)
		})
	}
	return e
}

func (e *env) conn(name string) *nats.Conn {
	nc, err := e.srv.Connect(name)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

func (e *env) client(name string) *actors.Client {
	c, err := actors.NewClient(actors.ClientConfig{Cluster: cluster, Conn: e.conn(name), Catalog: e.cat, Logger: e.log})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// manager starts node's fan-out manager with its own connection and client.
func (e *env) manager(node string, ttl time.Duration) *Manager {
	return e.managerWith(node, ttl, nil)
}

// managerWith is manager with Config.Interest set to interest.
func (e *env) managerWith(node string, ttl time.Duration, interest func(string) bool) *Manager {
	m, err := Start(Config{NodeID: node, Cluster: cluster, Conn: e.conn("fanout-" + node), Meta: e.meta, Catalog: e.cat,
		Readers: ClientReaders(e.client("fanout-client-" + node)), Logger: e.log, LeaseTTL: ttl, Interest: interest})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(m.Stop)
	return m
}

// sent is what the producer got acknowledged.
type sent struct {
	partition int
	pos       core.Position
	stripe    stripe.ID
	rec       stripe.Record
}

// produce sends records numbered from..to-1 over the partitions and
// returns the acknowledged ones.
func (e *env) produce(c *actors.Client, from, to int) []sent {
	e.t.Helper()
	p, err := c.NewProducer(actors.ProducerConfig{Topic: topic})
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = p.Close(context.Background()) }()
	var mu sync.Mutex
	var out []sent
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		rec := record(i)
		wg.Add(1)
		p.Send(rec, -1, func(r actors.SendResult) {
			defer wg.Done()
			if r.Err != nil {
				e.t.Errorf("send %d: %v", i, r.Err)
				return
			}
			mu.Lock()
			out = append(out, sent{partition: r.Partition, pos: r.Pos, stripe: r.Stripe, rec: rec})
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// record i has a key that is text, binary or absent, and headers that
// travel as-is, base64-wrapped, or try to forge a Raidq-* header.
func record(i int) stripe.Record {
	r := stripe.Record{Value: []byte(fmt.Sprintf("value-%d", i))}
	switch i % 3 {
	case 0:
		r.Key = []byte(fmt.Sprintf("key-%d", i))
	case 1:
		r.Key = []byte{0xff, 0x00, '\n', byte(i)}
	}
	r.Headers = []stripe.Header{{Name: "trace", Value: []byte(fmt.Sprint(i))}}
	if i%5 == 0 {
		r.Headers = append(r.Headers, stripe.Header{Name: "Raidq-Offset", Value: []byte("1")},
			stripe.Header{Name: "bin", Value: []byte{0, 1, 2}}, stripe.Header{Name: "has space", Value: []byte("x")})
	}
	return r
}

// got is one message a subscriber received.
type got struct {
	partition int
	d         Delivery
	hdr       nats.Header
}

// collector is a plain NATS subscriber on every partition of the topic.
type collector struct {
	mu  sync.Mutex
	all []got
	err []error
}

func (e *env) subscribe() *collector {
	subj, _ := bus.NewSubjects(cluster)
	col := &collector{}
	nc := e.conn("subscriber")
	sub, err := nc.Subscribe(subj.DeliverAll(topic), func(m *nats.Msg) {
		var p int
		if _, err := fmt.Sscanf(m.Subject, "raidq."+cluster+".deliver."+topic+".%d", &p); err != nil {
			col.add(got{}, fmt.Errorf("subject %s: %v", m.Subject, err))
			return
		}
		d, err := ParseMsg(m)
		col.add(got{partition: p, d: d, hdr: m.Header}, err)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	return col
}

func (c *collector) add(g got, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = append(c.err, err)
		return
	}
	c.all = append(c.all, g)
}

func (c *collector) snapshot() []got {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]got(nil), c.all...)
}

type recID struct {
	stripe stripe.ID
	index  uint32
}

// distinct counts distinct (stripe, index) pairs received.
func (c *collector) distinct() int {
	seen := make(map[recID]bool)
	for _, g := range c.snapshot() {
		seen[recID{g.d.Stripe, g.d.Pos.Index}] = true
	}
	return len(seen)
}

// check verifies that every sent record arrived with the right position,
// stripe, key, value and headers, that after dropping replays (dedupe by
// stripe and index) each partition is in strictly increasing position
// order, and returns how many messages were replays.
func check(t *testing.T, col *collector, want []sent) (dups int) {
	t.Helper()
	col.mu.Lock()
	for _, err := range col.err {
		t.Errorf("subscriber: %v", err)
	}
	col.mu.Unlock()
	seen := make(map[recID]bool)
	last := make(map[int]core.Position)
	byID := make(map[recID]got)
	for _, g := range col.snapshot() {
		id := recID{g.d.Stripe, g.d.Pos.Index}
		if seen[id] {
			dups++
			continue
		}
		seen[id] = true
		byID[id] = g
		if l, ok := last[g.partition]; ok && !l.Less(g.d.Pos) {
			t.Errorf("partition %d: %v delivered after %v", g.partition, g.d.Pos, l)
		}
		last[g.partition] = g.d.Pos
	}
	for _, s := range want {
		id := recID{s.stripe, s.pos.Index}
		g, ok := byID[id]
		if !ok {
			t.Errorf("record at partition %d %v (stripe %v) never published", s.partition, s.pos, s.stripe)
			continue
		}
		if g.partition != s.partition || g.d.Pos != s.pos {
			t.Errorf("stripe %v index %d: published at partition %d %v, sent to %d %v", s.stripe, s.pos.Index, g.partition, g.d.Pos, s.partition, s.pos)
		}
		if !bytes.Equal(g.d.Record.Value, s.rec.Value) || !bytes.Equal(g.d.Record.Key, s.rec.Key) {
			t.Errorf("%v: got key %q value %q, want %q %q", s.pos, g.d.Record.Key, g.d.Record.Value, s.rec.Key, s.rec.Value)
		}
		if len(g.d.Record.Headers) != len(s.rec.Headers) {
			t.Errorf("%v: headers %v, want %v", s.pos, g.d.Record.Headers, s.rec.Headers)
		}
		for _, h := range s.rec.Headers {
			found := false
			for _, gh := range g.d.Record.Headers {
				found = found || (gh.Name == h.Name && bytes.Equal(gh.Value, h.Value))
			}
			if !found {
				t.Errorf("%v: header %q=%q missing from %v", s.pos, h.Name, h.Value, g.d.Record.Headers)
			}
		}
		// What a non-Go subscriber sees: the raw headers.
		if v := g.hdr.Values(HeaderOffset); len(v) != 1 || v[0] != fmt.Sprint(s.pos.Offset) {
			t.Errorf("%v: %s = %v", s.pos, HeaderOffset, v)
		}
		if v := g.hdr.Get(HeaderStripe); v != s.stripe.String() {
			t.Errorf("%v: %s = %q, want %q", s.pos, HeaderStripe, v, s.stripe)
		}
		if len(s.rec.Key) > 0 && s.rec.Key[0] == 'k' && g.hdr.Get(HeaderKey) != string(s.rec.Key) {
			t.Errorf("%v: text key sent as %q", s.pos, g.hdr.Get(HeaderKey))
		}
		if len(s.rec.Key) > 0 && s.rec.Key[0] == 0xff && g.hdr.Get(HeaderKeyEncoding) != "base64" {
			t.Errorf("%v: binary key without base64 encoding header: %v", s.pos, g.hdr)
		}
		if g.hdr.Get("trace") == "" {
			t.Errorf("%v: plain record header not passed as-is: %v", s.pos, g.hdr)
		}
	}
	return dups
}

// holders returns, per partition, the managers that say they publish it.
func holders(ms ...*Manager) map[int][]int {
	out := make(map[int][]int)
	for i, m := range ms {
		for _, s := range m.Status() {
			if s.Holding {
				out[s.Partition] = append(out[s.Partition], i)
			}
		}
	}
	return out
}

func TestFanoutPublishesEveryRecordInOrder(t *testing.T) {
	e := newEnv(t, 2)
	col := e.subscribe()
	m := e.manager("n0", time.Second)
	c := e.client("producer")
	want := e.produce(c, 0, 600)
	testkit.WaitFor(t, "every record published", func() bool { return col.distinct() >= len(want) })
	if dups := check(t, col, want); dups != 0 {
		t.Errorf("%d records published twice by a single holder", dups)
	}
	st := m.Status()
	if len(st) != 2 || !st[0].Holding || !st[1].Holding || st[0].Published+st[1].Published != uint64(len(want)) {
		t.Errorf("status: %+v", st)
	}
}

func TestFanoutOneHolderAndTakeover(t *testing.T) {
	e := newEnv(t, 2)
	col := e.subscribe()
	const ttl = time.Second
	ms := []*Manager{e.manager("n0", ttl), e.manager("n1", ttl), e.manager("n2", ttl)}
	testkit.WaitFor(t, "a holder for each partition", func() bool { h := holders(ms...); return len(h[0]) > 0 && len(h[1]) > 0 })
	c := e.client("producer")
	first := e.produce(c, 0, 400)
	testkit.WaitFor(t, "first half published", func() bool { return col.distinct() >= len(first) })
	if dups := check(t, col, first); dups != 0 {
		t.Errorf("%d records published twice while every manager was up: more than one holder", dups)
	}
	h := holders(ms...)
	if len(h[0]) != 1 || len(h[1]) != 1 {
		t.Fatalf("holders per partition: %v", h)
	}
	// Kill the holder of partition 0 (no release: the lease must expire).
	dead := h[0][0]
	ms[dead].Kill()
	killedAt := time.Now()
	var live []*Manager
	for i, m := range ms {
		if i != dead {
			live = append(live, m)
		}
	}
	second := e.produce(c, 400, 800)
	took := testkit.WaitFor(t, "a live node holds partition 0", func() bool { h := holders(live...); return len(h[0]) == 1 && len(h[1]) == 1 })
	t.Logf("partition 0 taken over %v after its holder died", time.Since(killedAt).Round(time.Millisecond))
	if took > 3*ttl {
		t.Errorf("partition 0 taken over only %v after the sends following its holder's death, want within 3 lease TTLs (%v)", took.Round(time.Millisecond), 3*ttl)
	}
	all := append(first, second...)
	testkit.WaitFor(t, "every record published after the takeover", func() bool { return col.distinct() >= len(all) })
	dups := check(t, col, all)
	t.Logf("%d messages, %d replayed after the takeover", len(col.snapshot()), dups)
	// Graceful stop releases at once: the last survivor takes everything.
	live[0].Stop()
	if took := testkit.WaitFor(t, "the last node holds both partitions", func() bool { h := holders(live[1]); return len(h[0]) == 1 && len(h[1]) == 1 }); took > 3*ttl {
		t.Errorf("the last node took %v to hold both partitions after a graceful stop, want within 3 lease TTLs (%v)", took.Round(time.Millisecond), 3*ttl)
	}
	third := e.produce(c, 800, 900)
	all = append(all, third...)
	testkit.WaitFor(t, "every record published", func() bool { return col.distinct() >= len(all) })
	check(t, col, all)
}

func TestEncodeParseRoundTrip(t *testing.T) {
	for i := 0; i < 10; i++ {
		rec := record(i)
		if i%2 == 1 {
			rec.Time = 1_700_000_000_123_456_789 + int64(i)
		}
		d := core.Delivery{Pos: core.Position{Offset: uint64(1e18) + uint64(i), Index: uint32(i)}, Stripe: stripe.ID{Producer: stripe.ProducerID{1, 2}, Seq: uint64(i)}, Record: rec}
		m := Encode("s", d)
		// Through the wire format and back.
		hb, err := natsHeaderRoundTrip(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseMsg(hb)
		if err != nil {
			t.Fatal(err)
		}
		if got.Pos != d.Pos || got.Stripe != d.Stripe || !bytes.Equal(got.Record.Key, rec.Key) || !bytes.Equal(got.Record.Value, rec.Value) || len(got.Record.Headers) != len(rec.Headers) || got.Record.Time != rec.Time {
			t.Errorf("%d: %+v != %+v", i, got, d)
		}
		if _, set := hb.Header[HeaderTime]; set != (rec.Time != 0) {
			t.Errorf("%d: %s set %v for a record time %d", i, HeaderTime, set, rec.Time)
		}
		if v := hb.Header.Values(HeaderOffset); len(v) != 1 {
			t.Errorf("%d: a record header forged %s: %v", i, HeaderOffset, v)
		}
	}
}

// natsHeaderRoundTrip encodes m's headers as NATS does and decodes them.
func natsHeaderRoundTrip(m *nats.Msg) (*nats.Msg, error) {
	var b bytes.Buffer
	b.WriteString("NATS/1.0\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	h, err := nats.DecodeHeadersMsg(b.Bytes())
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: m.Subject, Header: h, Data: m.Data}, nil
}

// A holder whose renewal is fenced (another node rewrote the lease) stops
// publishing at once, and resumes from the lease's position once it can
// take the lease again.
func TestFanoutFencedRenewalStops(t *testing.T) {
	e := newEnv(t, 1)
	col := e.subscribe()
	const ttl = time.Second
	m := e.manager("n0", ttl)
	testkit.WaitFor(t, "n0 holding", func() bool { return len(holders(m)[0]) == 1 })
	c := e.client("producer")
	first := e.produce(c, 0, 100)
	testkit.WaitFor(t, "first batch published", func() bool { return col.distinct() >= len(first) })
	// A thief rewrites the live lease (keeping its position): n0's next
	// renewal is fenced.
	ctx := context.Background()
	l, rev, err := e.meta.ReadLease(ctx, LeaseName(topic, 0))
	if err != nil || rev == 0 {
		t.Fatalf("read lease: %+v %d %v", l, rev, err)
	}
	if _, err := e.meta.RenewLease(ctx, LeaseName(topic, 0), "thief", ttl, time.Now(), rev, l.Data); err != nil {
		t.Fatal(err)
	}
	if took := testkit.WaitFor(t, "n0 to stop publishing", func() bool { return len(holders(m)[0]) == 0 }); took > ttl {
		t.Fatalf("the fenced holder stopped %v after its lease was rewritten, want within the lease TTL (%v)", took.Round(time.Millisecond), ttl)
	}
	before := len(col.snapshot())
	stopped := time.Now()
	second := e.produce(c, 100, 200)
	// Nothing is published while the thief's lease is live...
	for time.Since(stopped) < ttl*7/10 {
		if n := len(col.snapshot()); n != before {
			t.Fatalf("%d messages published by a fenced holder", n-before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ...then n0 takes the expired lease back and resumes from its position.
	all := append(first, second...)
	testkit.WaitFor(t, "every record published after n0 took the lease back", func() bool { return col.distinct() >= len(all) })
	dups := check(t, col, all)
	t.Logf("%d replayed after the lease came back", dups)
}

// TestFanoutIdleWithoutSubscribers: with no subscriber the holder keeps
// the lease but publishes nothing; a subscriber that arrives gets every
// record produced after it subscribed; when it leaves, the holder idles
// again.
func TestFanoutIdleWithoutSubscribers(t *testing.T) {
	e := newEnv(t, 1)
	m := e.managerWith("n0", time.Second, e.srv.Interest)
	idle := func() bool { st := m.Status(); return len(st) == 1 && st[0].Holding && st[0].Idle }
	testkit.WaitFor(t, "the holder idles", idle)
	c := e.client("producer")
	e.produce(c, 0, 100)
	if st := m.Status(); st[0].Published != 0 || !st[0].Idle {
		t.Fatalf("published with no subscriber: %+v", st)
	}

	subj, _ := bus.NewSubjects(cluster)
	nc := e.conn("late-subscriber")
	col := &collector{}
	sub, err := nc.Subscribe(subj.DeliverAll(topic), func(msg *nats.Msg) {
		d, err := ParseMsg(msg)
		col.add(got{d: d, hdr: msg.Header}, err)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}
	want := e.produce(c, 100, 300)
	testkit.WaitFor(t, "every record sent after subscribing", func() bool {
		seen := make(map[recID]bool)
		for _, g := range col.snapshot() {
			seen[recID{g.d.Stripe, g.d.Pos.Index}] = true
		}
		for _, s := range want {
			if !seen[recID{s.stripe, s.pos.Index}] {
				return false
			}
		}
		return true
	})
	if st := m.Status(); st[0].Idle {
		t.Fatalf("still idle with a subscriber: %+v", st)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the holder idles again", idle)
}

// TestFanoutPublishFailureEndsHolding: when publishing fails (here the
// manager's connection is closed), the holding ends cleanly and the
// manager still stops.
func TestFanoutPublishFailureEndsHolding(t *testing.T) {
	e := newEnv(t, 1)
	col := e.subscribe()
	pubConn, err := e.srv.Connect("fanout-n0-closing")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Start(Config{NodeID: "n0", Cluster: cluster, Conn: pubConn, Meta: e.meta, Catalog: e.cat,
		Readers: ClientReaders(e.client("fanout-client-n0")), Logger: e.log, LeaseTTL: time.Second, Interest: e.srv.Interest})
	if err != nil {
		t.Fatal(err)
	}
	c := e.client("producer")
	want := e.produce(c, 0, 50)
	testkit.WaitFor(t, "the first records published", func() bool { return col.distinct() >= len(want) })
	pubConn.Close()
	e.produce(c, 50, 100)
	testkit.WaitFor(t, "the holding to end", func() bool {
		st := m.Status()
		return len(st) == 1 && st[0].Takeovers >= 2 // it ended, and the job took the lease again
	})
	m.Stop()
}
