package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestKafkaKillTwoIdempotent: six `raidq node` processes behind two
// gateways, a stateless `raidq kafka` process and the one inside node 0
// (`raidq node --kafka-listen`); an idempotent kgo producer (acks=all,
// both gateways as seeds) sends 20,000 records while two storage nodes
// are SIGKILLed; every record is acked, and a three-member kgo group reads
// every acked value back.
func TestKafkaKillTwoIdempotent(t *testing.T) {
	total := 20000
	if testing.Short() {
		total = 2000
	}
	start := time.Now()
	bin := testBinary(t)
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	inNode := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := cluster.Start(t, cluster.Config{Binary: bin, Dir: t.TempDir(), Nodes: 6, Args: []string{"--no-fsync"},
		NodeArgs: func(i int) []string {
			if i == 0 {
				return []string{"--kafka-listen", inNode}
			}
			return nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	waitMembers(ctx, t, c)
	createTopic(ctx, t, c.URL(), "orders", 3)
	gws := []*cluster.Gateway{c.StartGateway(t, "gw0"), {ID: c.Node(0).ID, Addr: inNode}}
	seeds := waitGateways(ctx, t, gws, "orders")
	t.Logf("six nodes, two gateways and the topic are up after %v", time.Since(start).Round(time.Millisecond))

	prod := newKgo(t, producerOpts(seeds)...)
	a := newAcks()
	produced := time.Now()
	produceValues(ctx, prod, a, total, func(i int) {
		if i == total/2 {
			acked := a.count()
			for _, n := range []int{1, 4} {
				if err := c.Node(n).Proc.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			c.KillNode(1) // waits until it is gone
			c.KillNode(4)
			t.Logf("killed n1 and n4 %v into production, with %d records acked and %d in flight",
				time.Since(produced).Round(time.Millisecond), acked, i-acked)
		}
	})
	a.check(ctx, t, prod, total)
	t.Logf("%d records acked in %v with two nodes killed", total, time.Since(produced).Round(time.Millisecond))

	consumed := time.Now()
	r := startGroup(t, "g-kill-two", "orders", 3, kgo.SeedBrokers(seeds...))
	read, dups := r.readAll(t, a.values())
	r.stop()
	t.Logf("a three-member group read all %d acked values in %v (%d records, %d duplicates)",
		total, time.Since(consumed).Round(time.Millisecond), read, dups)
}

// TestKafkaGatewayKilled: a kgo producer and a kgo group member, both
// bootstrapped with two `raidq kafka` gateways, use one of them (the
// other is kept unreachable until then); that gateway is SIGKILLed
// mid-stream. Production continues through the other, every record is
// acked, the consumer reads every acked value, and the group moves to the
// other gateway.
func TestKafkaGatewayKilled(t *testing.T) {
	total := 6000
	if testing.Short() {
		total = 2000
	}
	start := time.Now()
	f := startFailover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prod := newKgo(t, append(producerOpts(f.seeds), f.via...)...)
	r := startGroup(t, "g-failover", "orders", 1, append([]kgo.Opt{kgo.SeedBrokers(f.seeds...)}, f.via...)...)
	a := newAcks()
	var killed time.Time
	produceValues(ctx, prod, a, total, func(i int) {
		switch i {
		case total / 4:
			testkit.WaitFor(t, "the producer and the consumer working through "+f.victim.ID, func() bool {
				return r.count() > 0 && f.use.count(f.victim.BrokerID, produceKey) > 0 && f.use.count(f.victim.BrokerID, fetchKey) > 0
			})
			t.Logf("producing and consuming through %s after %v", f.victim.ID, time.Since(start).Round(time.Millisecond))
		case total / 2: // with records in flight
			f.kill(t)
			killed = time.Now()
			t.Logf("killed gateway %s (broker %d): %d records unacked, %d read", f.victim.ID, f.victim.BrokerID, i-a.count(), r.count())
		}
	})
	a.check(ctx, t, prod, total)
	t.Logf("all %d records acked %v after the kill", total, time.Since(killed).Round(time.Millisecond))
	read, dups := r.readAll(t, a.values())
	r.stop()
	t.Logf("the consumer read every acked value %v after the kill (%d records, %d duplicates)",
		time.Since(killed).Round(time.Millisecond), read, dups)
	f.checkMoved(ctx, t, r.clients[0])
	t.Logf("the group is coordinated by %s %v after the kill", f.other.ID, time.Since(killed).Round(time.Millisecond))
}

// failover is TestKafkaGatewayKilled's setup: `raidq dev`, topic orders
// (3 partitions), two gateway processes, and the kgo options (via) that
// count the requests each gateway gets and keep other unreachable until
// victim, the group's coordinator, is killed.
type failover struct {
	seeds         []string
	victim, other *cluster.Gateway
	gate          *dialGate
	use           *brokerUse
	via           []kgo.Opt
}

func startFailover(t *testing.T) *failover {
	t.Helper()
	bin := testBinary(t)
	url, _ := startDev(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createTopic(ctx, t, url, "orders", 3)
	gws := []*cluster.Gateway{cluster.GatewayFor(t, bin, url, "gw0"), cluster.GatewayFor(t, bin, url, "gw1")}
	f := &failover{seeds: waitGateways(ctx, t, gws, "orders"), use: &brokerUse{n: map[[2]int32]int{}}}
	// The group's coordinator is the gateway killed: then the producer,
	// the consumer's fetches and its group all lose their gateway.
	f.victim, f.other = coordinatorOf(ctx, t, gws, "g-failover")
	f.gate = &dialGate{closed: f.other.Addr}
	f.via = []kgo.Opt{kgo.Dialer(f.gate.dial), kgo.WithHooks(f.use)}
	return f
}

// kill opens the way to other and kills victim.
func (f *failover) kill(t *testing.T) {
	t.Helper()
	if n := f.use.count(f.other.BrokerID, produceKey) + f.use.count(f.other.BrokerID, fetchKey); n > 0 {
		t.Fatalf("%d produce or fetch requests reached %s, which the test keeps unreachable", n, f.other.ID)
	}
	f.gate.open()
	f.victim.Proc.Kill()
}

// checkMoved checks that produce and fetch requests went to other after
// the kill, and that the group moves there once other judges victim gone
// (its registry session): member heartbeats and commits there.
func (f *failover) checkMoved(ctx context.Context, t *testing.T, member *kgo.Client) {
	t.Helper()
	if f.use.count(f.other.BrokerID, produceKey) == 0 || f.use.count(f.other.BrokerID, fetchKey) == 0 {
		t.Fatalf("after the kill: %d produce and %d fetch requests went to %s",
			f.use.count(f.other.BrokerID, produceKey), f.use.count(f.other.BrokerID, fetchKey), f.other.ID)
	}
	testkit.WaitFor(t, "the member heartbeating to "+f.other.ID, func() bool { return f.use.count(f.other.BrokerID, heartbeatKey) > 0 })
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit through %s: %v", f.other.ID, err)
	}
}

// producerOpts configure the tests' idempotent (kgo's default) acks=all
// producer: small batches (about 60 records: many produce requests, not
// a few huge ones) and at most 500 records buffered, so that a fault
// lands among requests in flight and production goes on after it.
func producerOpts(seeds []string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("orders"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(2 * time.Minute),
		kgo.ProducerBatchMaxBytes(2048), kgo.MaxBufferedRecords(500)}
}

// startDev runs `raidq dev` (six nodes, no fsync) on a free port with
// args added and returns its NATS URL and process once its nodes are
// members; a cleanup kills it.
func startDev(t *testing.T, bin string, args ...string) (string, *cluster.Proc) {
	t.Helper()
	url, p := startDevAuth(t, bin, args...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	if err := cluster.WaitMembers(ctx, url, "raidq", ids, time.Now().Add(-cluster.HeartbeatSlack), p.Check); err != nil {
		t.Fatal(err)
	}
	return url, p
}

// createTopic creates topic with the given partitions through the Go API.
func createTopic(ctx context.Context, t *testing.T, url, topic string, partitions int) {
	t.Helper()
	cl, err := raidq.Connect(url, raidq.WithLogger(testkit.Logger(t, 4)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateTopic(ctx, raidq.TopicConfig{Name: topic, Partitions: partitions, Params: raidq.DefaultParams()}); err != nil {
		t.Fatal(err)
	}
}

// newKgo is a kgo client closed at cleanup.
func newKgo(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitGateways waits until every gateway lists all of them as brokers and
// knows topic (a producer that met an unknown topic a few times would
// fail its records), and returns their addresses: the seed brokers.
func waitGateways(ctx context.Context, t *testing.T, gws []*cluster.Gateway, topic string) []string {
	t.Helper()
	var seeds []string
	for _, gw := range gws {
		seeds = append(seeds, gw.Addr)
	}
	for _, gw := range gws {
		waitGateway(ctx, t, gw, len(gws), topic)
	}
	return seeds
}

// waitGateway waits until gw's metadata lists brokers brokers and topic.
func waitGateway(ctx context.Context, t *testing.T, gw *cluster.Gateway, brokers int, topic string) {
	t.Helper()
	cl := newKgo(t, kgo.SeedBrokers(gw.Addr))
	defer cl.Close()
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("%s's last metadata: %s", gw.ID, last)
		}
	}()
	testkit.WaitFor(t, gw.ID+" listing every gateway and topic "+topic, func() bool {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%d brokers, topics %+v", len(resp.Brokers), resp.Topics)
		return len(resp.Brokers) == brokers && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0
	})
}

// coordinatorOf asks every gateway which one coordinates group and
// returns that one and another.
func coordinatorOf(ctx context.Context, t *testing.T, gws []*cluster.Gateway, group string) (*cluster.Gateway, *cluster.Gateway) {
	t.Helper()
	var ids []int32
	for _, gw := range gws {
		cl := newKgo(t, kgo.SeedBrokers(gw.Addr))
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = group
		resp, err := req.RequestWith(ctx, cl)
		cl.Close()
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("FindCoordinator %s through %s: %v (error code %d)", group, gw.ID, err, resp.ErrorCode)
		}
		ids = append(ids, resp.NodeID)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("the gateways disagree on group %s's coordinator: broker ids %v", group, ids)
		}
	}
	for i, gw := range gws {
		if gw.BrokerID == ids[0] {
			return gw, gws[(i+1)%len(gws)]
		}
	}
	t.Fatalf("group %s's coordinator %d is none of the gateways", group, ids[0])
	return nil, nil
}

// dialGate refuses kgo's connections to one address until opened.
type dialGate struct {
	closed string
	opened atomic.Bool
}

func (g *dialGate) open() { g.opened.Store(true) }

func (g *dialGate) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if host == g.closed && !g.opened.Load() {
		return nil, fmt.Errorf("the test keeps %s unreachable for now", host)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, host)
}

// Request keys counted by brokerUse.
const (
	produceKey   = 0
	fetchKey     = 1
	heartbeatKey = 12
)

// brokerUse counts the requests a kgo client wrote, by broker and key (a
// kgo hook).
type brokerUse struct {
	mu sync.Mutex
	n  map[[2]int32]int
}

func (b *brokerUse) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n[[2]int32{meta.NodeID, int32(key)}]++
}

func (b *brokerUse) count(broker int32, key int16) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[[2]int32{broker, int32(key)}]
}

// acks collects a producer's outcomes by value.
type acks struct {
	mu    sync.Mutex
	acked map[string]ackedAt
	errs  int
	first error
}

// ackedAt is where the gateway said a record landed (a failure shows it).
type ackedAt struct {
	partition int32
	offset    int64
}

func newAcks() *acks { return &acks{acked: map[string]ackedAt{}} }

func (a *acks) done(r *kgo.Record, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.errs++
		if a.first == nil {
			a.first = fmt.Errorf("record %s: %w", r.Value, err)
		}
		return
	}
	a.acked[string(r.Value)] = ackedAt{r.Partition, r.Offset}
}

func (a *acks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

func (a *acks) values() map[string]ackedAt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.acked)
}

// check flushes cl and fails t unless every one of total records was acked.
func (a *acks) check(ctx context.Context, t *testing.T, cl *kgo.Client, total int) {
	t.Helper()
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v (%d of %d acked)", err, a.count(), total)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.errs > 0 || len(a.acked) != total {
		t.Fatalf("%d of %d records acked, %d failed; the first: %v", len(a.acked), total, a.errs, a.first)
	}
}

// produceValues produces total records with unique values, calling at(i)
// before record i (where a test injects its fault).
func produceValues(ctx context.Context, cl *kgo.Client, a *acks, total int, at func(i int)) {
	for i := range total {
		at(i)
		cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%97), Value: fmt.Appendf(nil, "v-%06d", i)}, a.done)
	}
}

// groupReader is a kgo consumer group (reset to the start) whose members
// poll until stopped, counting what they read by value.
type groupReader struct {
	clients []*kgo.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu   sync.Mutex
	seen map[string]int
	read int
	last map[int32]int64 // the highest offset read per partition
	gaps []string        // the first times a partition went backwards: shown on failure
}

// startGroup starts members kgo clients of group over topic.
func startGroup(t *testing.T, group, topic string, members int, opts ...kgo.Opt) *groupReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &groupReader{cancel: cancel, seen: map[string]int{}, last: map[int32]int64{}}
	for i := range members {
		cl := newKgo(t, append(slices.Clone(opts), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ClientID(fmt.Sprintf("%s-%d", group, i)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
		r.clients = append(r.clients, cl)
		r.wg.Add(1)
		go r.poll(ctx, t, cl)
	}
	t.Cleanup(r.stop) // before the clients close
	return r
}

func (r *groupReader) poll(ctx context.Context, t *testing.T, cl *kgo.Client) {
	defer r.wg.Done()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
				t.Logf("fetch %s/%d: %v", topic, p, err)
			}
		})
		r.mu.Lock()
		fs.EachRecord(func(rec *kgo.Record) {
			r.seen[string(rec.Value)]++
			r.read++
			if last, ok := r.last[rec.Partition]; ok && rec.Offset <= last && len(r.gaps) < 10 {
				r.gaps = append(r.gaps, fmt.Sprintf("partition %d went back from %d to %d at %s", rec.Partition, last, rec.Offset, time.Now().Format("15:04:05.000")))
			}
			r.last[rec.Partition] = max(r.last[rec.Partition], rec.Offset)
		})
		r.mu.Unlock()
	}
}

// explain logs where the unread values landed, how far each partition
// was read, and the members' committed offsets: what a failure needs.
func (r *groupReader) explain(t *testing.T, want map[string]ackedAt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type span struct {
		n        int
		min, max int64
	}
	unread := map[int32]*span{}
	for v, at := range want {
		if r.seen[v] > 0 {
			continue
		}
		s := unread[at.partition]
		if s == nil {
			s = &span{min: at.offset, max: at.offset}
			unread[at.partition] = s
		}
		s.n++
		s.min, s.max = min(s.min, at.offset), max(s.max, at.offset)
	}
	for p, s := range unread {
		t.Logf("partition %d: %d unread values acked at offsets %d..%d; read up to %d", p, s.n, s.min, s.max, r.last[p])
	}
	for _, g := range r.gaps {
		t.Log(g)
	}
	for i, cl := range r.clients {
		for topic, ps := range cl.CommittedOffsets() {
			for p, o := range ps {
				t.Logf("member %d: committed %s/%d at %d (epoch %d)", i, topic, p, o.Offset, o.Epoch)
			}
		}
	}
}

func (r *groupReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read
}

// readAll waits until every value of want was read and returns the
// records read and how many of them were duplicates.
func (r *groupReader) readAll(t *testing.T, want map[string]ackedAt) (int, int) {
	t.Helper()
	missing := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for v := range want {
			if r.seen[v] == 0 {
				n++
			}
		}
		return n
	}
	defer func() {
		if t.Failed() {
			t.Logf("%d of %d acked values never read", missing(), len(want))
			r.explain(t, want)
		}
	}()
	testkit.WaitFor(t, "the group to read every acked value", func() bool { return missing() == 0 })
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read, r.read - len(r.seen)
}

// stop ends the members' polling (idempotent; the clients close at cleanup).
func (r *groupReader) stop() {
	r.cancel()
	r.wg.Wait()
}
