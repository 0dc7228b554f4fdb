package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// repairCluster is six in-process nodes, each on its own LevelDB in a
// temporary directory (so a node can be killed, restarted on its data or
// wiped), behind one NATS server, with a client; real clock.
type repairCluster struct {
	t      *testing.T
	log    *slog.Logger
	srv    *natsserver.Server
	cat    *meta.StaticCatalog
	client *actors.Client
	cnc    *nats.Conn
	nodes  []*repairNode
}

type repairNode struct {
	id    string
	dir   string
	cfg   RepairConfig
	now   func() int64 // the node clock (and its store's); nil: real time
	nc    *nats.Conn
	store slotstore.Store
	node  *Node
}

// fastRepair is a repair configuration for tests: passes every 100ms over
// the last minute, everything older than D + 200ms, no scrub, no retention.
func fastRepair() RepairConfig {
	return RepairConfig{Interval: 100 * time.Millisecond, Window: time.Minute, Margin: 200 * time.Millisecond,
		RateMBps: 200, RequestTimeout: time.Second, ScrubInterval: -1, RetentionInterval: -1}
}

func newRepairCluster(t *testing.T, cfg RepairConfig) *repairCluster {
	t.Helper()
	c := &repairCluster{t: t, log: testkit.Logger(t, slog.LevelWarn), cat: meta.NewStaticCatalog()}
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	c.srv = srv
	t.Cleanup(srv.Shutdown)
	dir := t.TempDir()
	for i := range 6 {
		rn := &repairNode{id: fmt.Sprintf("n%d", i), dir: filepath.Join(dir, fmt.Sprintf("node-%d", i)), cfg: cfg}
		c.nodes = append(c.nodes, rn)
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	if c.cnc, err = srv.Connect("client"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.cnc.Close)
	if c.client, err = actors.NewClient(actors.ClientConfig{Cluster: testCluster, Conn: c.cnc, Catalog: c.cat, Logger: c.log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.client.Close)
	return c
}

func (c *repairCluster) ids() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.id
	}
	return out
}

// start starts node i on its directory (a new incarnation if it is empty).
func (c *repairCluster) start(i int) {
	c.t.Helper()
	rn := c.nodes[i]
	so := slotstore.Options{Logger: c.log, NoSync: true}
	if rn.now != nil {
		so.Now = func() uint64 { return uint64(rn.now()) }
	}
	st, err := slotstore.Open(rn.dir, so)
	if err != nil {
		c.t.Fatal(err)
	}
	nc, err := c.srv.Connect("node-" + rn.id)
	if err != nil {
		c.t.Fatal(err)
	}
	n, err := Start(Config{ID: rn.id, Cluster: testCluster, Store: st, Conn: nc, Catalog: c.cat, Logger: c.log, Repair: rn.cfg,
		Now: rn.now})
	if err != nil {
		c.t.Fatal(err)
	}
	rn.store, rn.nc, rn.node = st, nc, n
}

// kill stops node i abruptly and closes its store.
func (c *repairCluster) kill(i int) {
	rn := c.nodes[i]
	if rn.node == nil {
		return
	}
	rn.node.Kill()
	rn.nc.Close()
	_ = rn.store.Close()
	rn.node = nil
}

// stop stops node i gracefully.
func (c *repairCluster) stop(i int) {
	rn := c.nodes[i]
	if rn.node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = rn.node.Stop(ctx)
	rn.nc.Close()
	_ = rn.store.Close()
	rn.node = nil
}

// wipe kills node i and deletes its data directory.
func (c *repairCluster) wipe(i int) {
	c.t.Helper()
	c.kill(i)
	if err := os.RemoveAll(c.nodes[i].dir); err != nil {
		c.t.Fatal(err)
	}
}

func (c *repairCluster) createTopic(name string, partitions int) *meta.Topic {
	c.t.Helper()
	ens, err := meta.Ensembles(name, partitions, 6, c.ids())
	if err != nil {
		c.t.Fatal(err)
	}
	tp := &meta.Topic{Name: name, Partitions: partitions, Params: noGrid(), Ensembles: ens, Created: uint64(time.Now().UnixNano())}
	mustPut(c.t, c.cat, tp)
	return tp
}

// slots returns what node i's store holds of tp: partition → offset → shard
// (nothing while the node is down).
func (c *repairCluster) slots(i int, tp *meta.Topic) []map[uint64][]byte {
	c.t.Helper()
	out := make([]map[uint64][]byte, tp.Partitions)
	for p := range out {
		out[p] = make(map[uint64][]byte)
		if c.nodes[i].node == nil {
			continue
		}
		err := c.nodes[i].store.Scan(tp.Name, uint32(p), 0, math.MaxUint64, func(off uint64, b []byte) bool {
			out[p][off] = bytes.Clone(b)
			return true
		})
		if err != nil {
			c.t.Fatal(err)
		}
	}
	return out
}

// redundancy scans every store: for each partition and offset, the good
// shards of the largest group there. It returns how many decodable stripes
// have fewer than n, and how many offsets are not decodable at all.
func (c *repairCluster) redundancy(tp *meta.Topic) (belowN, partial, total int) {
	c.t.Helper()
	all := make([][]map[uint64][]byte, len(c.nodes))
	for i := range c.nodes {
		all[i] = c.slots(i, tp)
	}
	for p := range tp.Partitions {
		offs := map[uint64]bool{}
		for i := range all {
			for off := range all[i][p] {
				offs[off] = true
			}
		}
		for off := range offs {
			count := map[stripe.ID]int{}
			for pos, node := range tp.Ensembles[p] {
				i := c.index(node)
				b, ok := all[i][p][off]
				if !ok {
					continue
				}
				s, err := stripe.Parse(b)
				if err != nil || int(s.Index) != pos {
					continue
				}
				count[s.ID]++
			}
			best := 0
			for _, n := range count {
				best = max(best, n)
			}
			total++
			switch {
			case best < tp.Params.K:
				partial++
			case best < tp.Params.N:
				belowN++
			}
		}
	}
	return belowN, partial, total
}

func (c *repairCluster) index(id string) int {
	for i, n := range c.nodes {
		if n.id == id {
			return i
		}
	}
	c.t.Fatalf("no node %s", id)
	return -1
}

// produce sends count records (small batches, so many stripes) over the
// topic's partitions and fails the test if any send fails.
func (c *repairCluster) produce(tp *meta.Topic, from, count int) {
	c.t.Helper()
	p, err := c.client.NewProducer(actors.ProducerConfig{Topic: tp.Name, MaxBatchBytes: 512})
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() { _ = p.Close(context.Background()) }()
	res := sendAll(c.t, p, tp.Partitions, values(from, from+count))
	for v, r := range res {
		if r.Err != nil {
			c.t.Fatalf("send %s: %v", v, r.Err)
		}
	}
}

// TestRepairAfterKill: a node is down while 10,000 records are written
// (every stripe lands on five nodes); once it is back, repair gives every
// stripe its six shards again, checked by scanning every store directly.
func TestRepairAfterKill(t *testing.T) {
	c := newRepairCluster(t, fastRepair())
	tp := c.createTopic("orders", 2)
	const down = 3
	c.kill(down)
	start := time.Now()
	c.produce(tp, 0, 10000)
	t.Logf("wrote 10000 records in %v", time.Since(start))
	belowN, partial, total := c.redundancy(tp)
	if belowN == 0 || belowN+partial != total {
		t.Fatalf("before the restart: %d of %d stripes below n (partial %d); every stripe should miss the dead node's shard", belowN, total, partial)
	}
	// With one peer dead the live nodes still settle the ranges (nothing of
	// theirs is missing, and no stripe could hide decodably on one node):
	// their verified marks pass everything written, so they do not rescan.
	var last uint64
	for i := range c.nodes {
		for _, s := range c.slots(i, tp) {
			for off := range s {
				last = max(last, off)
			}
		}
	}
	testkit.WaitFor(t, "the live nodes' verified marks to pass the writes", func() bool {
		for i, n := range c.nodes {
			if i == down {
				continue
			}
			for p := range tp.Partitions {
				if m, _ := n.store.Mark(slotstore.MarkVerified, tp.Name, uint32(p)); m <= last {
					return false
				}
			}
		}
		return true
	})
	c.start(down)
	took := testkit.WaitFor(t, "every stripe to have n shards", func() bool {
		b, _, _ := c.redundancy(tp)
		return b == 0
	})
	_, partial, total = c.redundancy(tp)
	st := c.nodes[down].node.Stats().Snapshot()
	t.Logf("repair: %d stripes back to n shards in %v after the restart (%d not decodable at all); node stats: repaired %d, passes %d, last pass %v",
		total-partial, took, partial, st.ShardsRepaired, st.RepairPasses, time.Duration(st.RepairPassNanos))
	if st.ShardsRepaired < int64(total-partial) {
		t.Errorf("node reports %d shards repaired, want at least %d", st.ShardsRepaired, total-partial)
	}
	// What was rebuilt is what the others would have rebuilt: every shard
	// of the restarted node parses and belongs at its slot.
	for p, slots := range c.slots(down, tp) {
		pos := tp.Position(uint32(p), c.nodes[down].id)
		for off, b := range slots {
			if err := checkStored(tp, pos, off, b); err != nil {
				t.Fatalf("partition %d offset %d: %v", p, off, err)
			}
		}
	}
}

// scanStatus scans [from, to) of tp/p on node i over NATS (paged) and
// returns the status (UNKNOWN if any page said so) and the offsets seen.
func (c *repairCluster) scanStatus(i int, tp *meta.Topic, p uint32, from, to uint64) (bus.Status, map[uint64][]byte) {
	c.t.Helper()
	subj := c.client.Subjects().Scan(c.nodes[i].id, tp.Name, p)
	seen := map[uint64][]byte{}
	status := bus.StatusOK
	for cur := from; cur < to; {
		req := bus.ScanReq{Topic: tp.Name, Partition: p, From: cur, To: to}
		msg, err := c.cnc.Request(subj, req.Marshal(), 5*time.Second)
		if err != nil {
			c.t.Fatalf("scan node %d: %v", i, err)
		}
		rep, err := bus.DecodeScanReply(msg.Data)
		if err != nil {
			c.t.Fatal(err)
		}
		if rep.Status != bus.StatusOK && rep.Status != bus.StatusUnknown {
			c.t.Fatalf("scan node %d [%d,%d): %s %s", i, cur, to, rep.Status, rep.Detail)
		}
		if rep.Status == bus.StatusUnknown {
			status = bus.StatusUnknown
		}
		for _, e := range rep.Entries {
			seen[e.Offset] = bytes.Clone(e.Shard)
		}
		cur = rep.Next
	}
	return status, seen
}

// checkNeverEmpty scans every range node i held a slot in and fails if
// the node answers OK ("this is all there is") while a slot it held is
// missing. It returns whether every range answered OK.
func (c *repairCluster) checkNeverEmpty(i int, tp *meta.Topic, held []map[uint64][]byte) bool {
	c.t.Helper()
	allOK := true
	for p, slots := range held {
		ranges := map[uint64]bool{}
		for off := range slots {
			ranges[core.RangeStart(off)] = true
		}
		for lo := range ranges {
			status, seen := c.scanStatus(i, tp, uint32(p), lo, lo+core.RangeNanos)
			if status == bus.StatusUnknown {
				allOK = false
				continue
			}
			for off := range slots {
				if core.RangeStart(off) == lo && seen[off] == nil {
					c.t.Fatalf("node answered OK (empty) for partition %d offset %d, a slot it held before the wipe", p, off)
				}
			}
		}
	}
	return allOK
}

// TestRepairWipedNode: a node whose data directory is wiped comes back as
// a new incarnation. It never answers "empty" for a slot it held (UNKNOWN
// until repaired); after repair its store holds exactly the shards it held
// before, byte for byte.
func TestRepairWipedNode(t *testing.T) {
	c := newRepairCluster(t, fastRepair())
	tp := c.createTopic("orders", 2)
	c.produce(tp, 0, 3000)
	const w = 4
	// Every shard has landed everywhere: all five other nodes are repaired
	// peers and nothing is missing (each stripe went to all six).
	testkit.WaitFor(t, "every stripe on n nodes", func() bool {
		b, _, _ := c.redundancy(tp)
		return b == 0
	})
	held := c.slots(w, tp)
	n := 0
	for _, s := range held {
		n += len(s)
	}
	if n == 0 {
		t.Fatal("the node held nothing")
	}
	oldInc := c.nodes[w].store.Incarnation()

	// Back with an empty directory, repair off: UNKNOWN wherever it held a slot.
	c.wipe(w)
	cfg := c.nodes[w].cfg
	c.nodes[w].cfg.Disabled = true
	c.start(w)
	if inc := c.nodes[w].store.Incarnation(); inc.ID == oldInc.ID || inc.Birth <= tp.Created {
		t.Fatalf("wiped node kept incarnation %v (old %v)", inc, oldInc)
	}
	if c.checkNeverEmpty(w, tp, held) {
		t.Fatal("a wiped node with repair off answered OK for the ranges it held")
	}
	c.stop(w)

	// Repair on: it fills the past; meanwhile it never says "empty".
	c.nodes[w].cfg = cfg
	c.start(w)
	took := testkit.WaitFor(t, "the wiped node to answer OK for everything it held", func() bool {
		return c.checkNeverEmpty(w, tp, held)
	})
	got := c.slots(w, tp)
	for p := range held {
		if len(got[p]) != len(held[p]) {
			t.Errorf("partition %d: %d slots after repair, held %d", p, len(got[p]), len(held[p]))
		}
		for off, b := range held[p] {
			if !bytes.Equal(got[p][off], b) {
				t.Fatalf("partition %d offset %d: repaired shard differs from the one held before", p, off)
			}
		}
	}
	st := c.nodes[w].node.Stats().Snapshot()
	t.Logf("wiped node refilled (%d shards) in %v; repaired %d, holes %d", n, took, st.ShardsRepaired, st.Holes)
	if st.Holes != 0 {
		t.Errorf("%d holes with every peer up", st.Holes)
	}
}

// TestWipedNodeClockBehind: a node whose clock is an hour behind is wiped
// and restarted. Its new incarnation takes its birth from cluster time
// (its peers' clocks), not its own clock: it answers UNKNOWN, never
// "empty", for every slot its old incarnation held. Born on its own
// clock, before the topic's creation, it would have answered "empty" for
// the topic's whole history (Topic.BirthFor turned that birth into 0).
func TestWipedNodeClockBehind(t *testing.T) {
	c := newRepairCluster(t, fastRepair())
	tp := c.createTopic("orders", 1)
	c.produce(tp, 0, 300)
	const w = 2
	held := c.slots(w, tp)
	if len(held[0]) == 0 {
		t.Fatal("the node held nothing")
	}
	c.wipe(w)
	c.nodes[w].cfg.Disabled = true // nothing refills it: what it answers is its birth's doing
	c.nodes[w].now = func() int64 { return time.Now().Add(-time.Hour).UnixNano() }
	c.start(w)
	inc := c.nodes[w].store.Incarnation()
	if birth := tp.BirthFor(inc.Birth); birth <= tp.Created {
		t.Errorf("wiped node born at %d (topic created %d, its own clock an hour behind): BirthFor gives %d", inc.Birth, tp.Created, birth)
	}
	if c.checkNeverEmpty(w, tp, held) {
		t.Fatal("the wiped node answered OK for every range it held")
	}
	// A restart on the settled directory keeps the birth.
	c.stop(w)
	c.start(w)
	if again := c.nodes[w].store.Incarnation(); again != inc {
		t.Fatalf("restart changed the incarnation: %v, was %v", again, inc)
	}
}

// TestRepairTwoWipedNodes: two nodes wiped at once refill each other's
// past without waiting on each other (each is a young peer of the other).
func TestRepairTwoWipedNodes(t *testing.T) {
	c := newRepairCluster(t, fastRepair())
	tp := c.createTopic("orders", 1)
	c.produce(tp, 0, 1000)
	testkit.WaitFor(t, "every stripe on n nodes", func() bool {
		b, _, _ := c.redundancy(tp)
		return b == 0
	})
	wiped := []int{1, 5}
	held := map[int][]map[uint64][]byte{}
	for _, i := range wiped {
		held[i] = c.slots(i, tp)
		c.wipe(i)
	}
	for _, i := range wiped {
		c.start(i)
	}
	for _, i := range wiped {
		testkit.WaitFor(t, fmt.Sprintf("node %d to answer OK for everything it held", i), func() bool {
			return c.checkNeverEmpty(i, tp, held[i])
		})
		got := c.slots(i, tp)
		for off, b := range held[i][0] {
			if !bytes.Equal(got[0][off], b) {
				t.Fatalf("node %d offset %d: repaired shard differs from the one held before", i, off)
			}
		}
	}
}

// TestRepairScrubCorrupt: one shard rots on disk. Readers still deliver
// its record (the shard counts as missing), the scrub finds it, and repair
// rewrites it with the original bytes.
func TestRepairScrubCorrupt(t *testing.T) {
	cfg := fastRepair()
	cfg.Window = time.Nanosecond // the repair walk leaves it to the scrub
	c := newRepairCluster(t, cfg)
	tp := c.createTopic("orders", 1)
	c.produce(tp, 0, 200)
	testkit.WaitFor(t, "every stripe on n nodes", func() bool {
		b, _, _ := c.redundancy(tp)
		return b == 0
	})
	const victim = 2
	held := c.slots(victim, tp)[0]
	var off uint64
	for o := range held {
		off = max(off, o)
	}
	orig := held[off]
	bad := bytes.Clone(orig)
	bad[len(bad)-1] ^= 0x40 // a data byte: the header still parses, the data CRC fails
	key := slotstore.Key{Topic: tp.Name, Partition: 0, Offset: off}
	if err := c.nodes[victim].store.(slotstore.Tamperer).Tamper(key, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[victim].store.Get(key); !errors.Is(err, slotstore.ErrCorrupt) {
		t.Fatalf("tampered shard reads %v", err)
	}

	// Reads deliver every record, seeing the bad shard as missing.
	col := newCollector(1, 200)
	var mu sync.Mutex
	var reported []core.CorruptReport
	r, err := c.client.NewReader(actors.ReaderConfig{Topic: tp.Name, Partition: 0, Sink: col.sink(0), OnReport: func(out core.Output) {
		mu.Lock()
		reported = append(reported, out.Corrupt...)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-col.done:
	case <-time.After(30 * time.Second):
		col.mu.Lock()
		defer col.mu.Unlock()
		t.Fatalf("delivered %d of 200 records with one corrupt shard", col.total)
	}
	r.Close()
	mu.Lock()
	if len(reported) != 1 || reported[0].Offset != off || reported[0].Node != tp.Position(0, c.nodes[victim].id) {
		t.Errorf("reader reported %+v, want the corrupt shard", reported)
	}
	mu.Unlock()

	// The node again with a scrub: it finds the shard, repair rewrites it.
	c.stop(victim)
	c.nodes[victim].cfg.ScrubInterval = 100 * time.Millisecond
	c.start(victim)
	testkit.WaitFor(t, "the shard rewritten", func() bool {
		b, err := c.nodes[victim].store.Get(key)
		return err == nil && bytes.Equal(b, orig)
	})
	// The counters move after the write is applied (when repair hears its
	// commit), so they may trail the store by a moment.
	testkit.WaitFor(t, "the scrub and repair counters", func() bool {
		st := c.nodes[victim].node.Stats().Snapshot()
		return st.ScrubCorrupt >= 1 && st.ShardsRepaired >= 1
	})
}

// TestRepairRacesLateOriginal: a repair write and the producer's own
// (late) write of the same shard race at the slot owner; whichever wins,
// both are answered OK and the slot holds the original bytes. A repair
// write never overwrites another good shard.
func TestRepairRacesLateOriginal(t *testing.T) {
	e := newEnv(t, envOpts{})
	tp := e.topic
	for i := range 40 {
		off := midTime + uint64(i)*ms
		orig := shardFor(t, 0, uint64(100+i), off)
		var wg sync.WaitGroup
		var repairStatus bus.Status
		var repairErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), requestWait)
			defer cancel()
			repairStatus, _, repairErr = e.node.repairWriteLocal(ctx, tp, 0, bytes.Clone(orig))
		}()
		w := e.write(0, off, orig)
		wg.Wait()
		if repairErr != nil || repairStatus != bus.StatusOK || w.Status != bus.StatusOK {
			t.Fatalf("race %d: repair %v %v, original %v %s", i, repairStatus, repairErr, w.Status, w.Detail)
		}
		got, err := e.stored(0, off)
		if err != nil || !bytes.Equal(got, orig) {
			t.Fatalf("race %d: slot holds other bytes (%v)", i, err)
		}
	}
	// Another stripe's shard: CONFLICT, the slot keeps the first.
	off := midTime + 100*ms
	first := shardFor(t, 0, 7, off)
	if w := e.write(0, off, first); w.Status != bus.StatusOK {
		t.Fatal(w.Detail)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestWait)
	defer cancel()
	st, _, err := e.node.repairWriteLocal(ctx, tp, 0, shardFor(t, 0, 8, off))
	if err != nil || st != bus.StatusConflict {
		t.Fatalf("repair over another good shard: %v %v", st, err)
	}
	if got, _ := e.stored(0, off); !bytes.Equal(got, first) {
		t.Fatal("repair overwrote a good shard")
	}
	// The repair flag on the wire stays refused.
	req := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: off + 1, Repair: true, Shard: shardFor(t, 0, 9, off+1)}
	r := decodeWrite(t, e.request(e.slot(0), req.Marshal()))
	expectStatus(t, "repair write from the wire", r.Status, bus.StatusBadRequest, r.Detail)
}

// TestRepairRetention: retention drops whole old ranges by time and by
// size, and never a range younger than the limit.
func TestRepairRetention(t *testing.T) {
	e := newEnv(t, envOpts{})
	now := int64(midTime) + 100*int64(second)
	e.clock.Set(uint64(now))
	tp := *e.topic
	tp.Retention = 10 * time.Second
	mustPut(t, e.cat, &tp)
	// A slot every 250ms over the last 30s, in partition 0.
	var offs []uint64
	for o := uint64(now) - 30*second; o < uint64(now); o += 250 * ms {
		offs = append(offs, o)
	}
	e.putDirect(0, offs, func(off uint64) []byte { return shardFor(t, 0, off/ms, off) })
	ctx := context.Background()
	if err := e.node.maint.retainPartition(ctx, &tp, 0, now); err != nil {
		t.Fatal(err)
	}
	cut := core.RetentionCut(now, int64(10*time.Second))
	if cut > uint64(now)-10*second || cut+second <= uint64(now)-10*second {
		t.Fatalf("cut %d is not the start of the range holding now-10s", cut)
	}
	kept := 0
	for _, off := range offs {
		_, err := e.stored(0, off)
		switch {
		case off < cut && !errors.Is(err, slotstore.ErrNotFound):
			t.Errorf("offset %d older than the cut kept (%v)", off, err)
		case off >= cut && err != nil:
			t.Errorf("offset %d (%v before now) dropped: younger than the limit", off, time.Duration(uint64(now)-off))
		case off >= cut:
			kept++
		}
	}
	if m, _ := e.store.Mark(slotstore.MarkDropped, testTopic, 0); m != cut {
		t.Errorf("dropped mark %d, want %d", m, cut)
	}
	if n := e.node.Stats().RetentionDropped.Load(); n != int64(len(offs)-kept) {
		t.Errorf("counter says %d dropped, want %d", n, len(offs)-kept)
	}

	// By size: keep at most ~3 ranges' worth; the oldest whole ranges go.
	size, _ := e.store.ApproxBytes(testTopic, 0, 0, math.MaxUint64)
	perRange := size / int64(kept) * 4
	tp.Retention, tp.RetentionBytes = 0, 3*perRange
	if err := e.node.maint.retainPartition(ctx, &tp, 0, now+int64(second)); err != nil {
		t.Fatal(err)
	}
	left, _ := e.store.ApproxBytes(testTopic, 0, 0, math.MaxUint64)
	if left > tp.RetentionBytes || left < tp.RetentionBytes-perRange {
		t.Errorf("%d bytes left, limit %d (a range is %d)", left, tp.RetentionBytes, perRange)
	}
	var first uint64
	_ = e.store.Scan(testTopic, 0, 0, math.MaxUint64, func(off uint64, _ []byte) bool { first = off; return false })
	for _, off := range offs { // whole ranges: all of the first kept range is there, nothing older
		_, err := e.stored(0, off)
		if core.RangeStart(off) < core.RangeStart(first) && err == nil || core.RangeStart(off) >= core.RangeStart(first) && err != nil {
			t.Errorf("size retention split a range or dropped a younger one: offset %d (first kept %d): %v", off, first, err)
		}
	}
	// Never beyond now - D - margin, however small the limit.
	tp.RetentionBytes = 1
	if err := e.node.maint.retainPartition(ctx, &tp, 0, now+int64(second)); err != nil {
		t.Fatal(err)
	}
	safe := core.RangeStart(uint64(now+int64(second)) - uint64(tp.Params.ReadDelay+e.node.maint.cfg.Margin))
	for _, off := range offs {
		if _, err := e.stored(0, off); off >= safe && err != nil {
			t.Errorf("offset %d dropped by size though younger than now - D - margin", off)
		}
	}

	// The loop itself: a node whose retention runs on its own.
	e2 := newEnv(t, envOpts{})
	e2.clock.Set(uint64(now))
	tp2 := *e2.topic
	tp2.Retention = 10 * time.Second
	mustPut(t, e2.cat, &tp2)
	e2.putDirect(0, offs, func(off uint64) []byte { return shardFor(t, 0, off/ms, off) })
	e2.node.Kill()
	e2.cfg.Repair = RepairConfig{RetentionInterval: 20 * time.Millisecond, ScrubInterval: -1, Interval: time.Hour}
	e2.start()
	testkit.WaitFor(t, "the retention loop to drop old ranges", func() bool {
		_, err := e2.stored(0, offs[0])
		return errors.Is(err, slotstore.ErrNotFound)
	})
	if _, err := e2.stored(0, offs[len(offs)-1]); err != nil {
		t.Fatalf("newest slot dropped: %v", err)
	}
}

// TestRepairReappendsInDoubt: a stripe whose shards sit on four nodes, two
// of which are down when a reader passes, is in doubt; the reader reports
// it and goes on. When the nodes return the stripe is decodable again; the
// nodes that kept the report hand it to the lowest live position (one of
// the nodes that were down), which re-appends it at a fresh offset with the
// same id: the reader delivers it late instead of losing it.
func TestRepairReappendsInDoubt(t *testing.T) {
	c := newRepairCluster(t, fastRepair())
	tp := c.createTopic("orders", 1)
	col := newCollector(1, 1)
	inDoubt := make(chan uint64, 16)
	r, err := c.client.NewReader(actors.ReaderConfig{Topic: tp.Name, Partition: 0, Sink: col.sink(0), OnReport: func(out core.Output) {
		for _, d := range out.InDoubt {
			select {
			case inDoubt <- d.Offset:
			default:
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Write one stripe by hand to positions 0..3 only.
	id := stripe.ID{Producer: stripe.ProducerID{9, 9}, Seq: 1}
	payload, err := stripe.AppendBatch(nil, []stripe.Record{{Value: []byte("late but not lost")}})
	if err != nil {
		t.Fatal(err)
	}
	off := uint64(time.Now().UnixNano())
	shards, err := stripe.Encode(id, off, 6, 4, payload)
	if err != nil {
		t.Fatal(err)
	}
	ens := tp.Ensembles[0]
	for pos := range 4 {
		req := bus.WriteReq{Topic: tp.Name, Partition: 0, Offset: off, Shard: shards[pos].Marshal()}
		msg, err := c.cnc.Request(c.client.Subjects().Slot(ens[pos], tp.Name, 0), req.Marshal(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rep, _ := bus.DecodeWriteReply(msg.Data); rep.Status != bus.StatusOK {
			t.Fatalf("write position %d: %s %s", pos, rep.Status, rep.Detail)
		}
	}
	// Positions 0 and 1 die before the reader gets there: the lowest
	// position, which re-appends, misses the reader's report.
	c.kill(c.index(ens[0]))
	c.kill(c.index(ens[1]))
	// The reader gives up on the offset (in doubt) and goes on past it.
	select {
	case got := <-inDoubt:
		if got != off {
			t.Fatalf("in doubt at %d, want %d", got, off)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reader never reported the offset in doubt")
	}
	col.mu.Lock()
	early := col.total
	col.mu.Unlock()
	if early != 0 {
		t.Fatal("delivered an undecodable stripe")
	}
	c.start(c.index(ens[0]))
	c.start(c.index(ens[1]))
	select {
	case <-col.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the in-doubt stripe was never re-appended and delivered")
	}
	// The lowest position re-appended it, once the others handed it over.
	if re := c.nodes[c.index(ens[0])].node.Stats().ReAppended.Load(); re != 1 {
		t.Errorf("position 0 re-appended %d times, want 1", re)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.count["late but not lost"] != 1 {
		t.Fatalf("delivered %v", col.count)
	}
}
