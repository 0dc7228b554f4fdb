package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/raidq/raidq/actors/core"
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
		// goleveldb's memdb-pool goroutine waits up to a second after
		// DB.Close before it exits (bounded, not a leak). No test here opens
		// LevelDB today; the ignore keeps the package safe if one does.
		goleak.IgnoreTopFunction("github.com/syndtr/goleveldb/leveldb.(*DB).mpoolDrain"),
		// protoactor's dead-letter throttle (actor.NewDeadLetter →
		// NewThrottle) starts a goroutine on the first dead letter of a
		// period that waits one DeadLetterThrottleInterval (1s) and exits.
		// Stopping or killing a node legitimately makes dead letters
		// (messages to stopped actors), and that second outlives goleak's
		// retries. Its name depends on inlining, hence both forms.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1"),
	)
}

// Test fixture constants. base is the start of a one-second owner range;
// the node clock starts half-way through it, so offsets base+250ms ..
// base+750ms are inside the accept window and the future bound.
const (
	testCluster = "tc"
	testTopic   = "orders"
	testNode    = "n2"
	requestWait = 5 * time.Second

	base    uint64 = 1_700_000_000_000_000_000
	ms      uint64 = 1_000_000
	second  uint64 = 1_000_000_000
	midTime        = base + 500*ms
)

// testNodePos is the node's ensemble position per partition of testTopic.
var testNodePos = []int{2, 4}

var testProducer = stripe.ProducerID{0xaa, 0xbb, 0xcc}

// nodeClock is the node clock under test: the kit's fake clock, whose Set
// takes this package's uint64 offsets (repair_test.go sets it with one).
type nodeClock struct{ *testkit.Clock }

func (c nodeClock) Set(at uint64) { c.Clock.Set(int64(at)) }

// envOpts tune newEnv.
type envOpts struct {
	maxPayload int32         // NATS max payload; 0 = default
	birth      uint64        // store incarnation birth; 0 = base-10s (before the topic)
	created    uint64        // topic creation; 0 = base-5s
	ownerIdle  time.Duration // 0 = node default
	maxPending int
	wrapStore  func(slotstore.Store) slotstore.Store
	repair     *RepairConfig // nil: maintenance loops off
}

// nodeEnv is one node under test behind an in-process NATS server, with a
// client connection to drive it with wire messages.
type nodeEnv struct {
	t      *testing.T
	log    *slog.Logger
	srv    *natsserver.Server
	nc     *nats.Conn // the test's client connection
	nodeNC *nats.Conn
	mem    *slotstore.MemStore
	store  slotstore.Store // what the node uses (mem, maybe wrapped)
	clock  nodeClock
	cat    *meta.StaticCatalog
	topic  *meta.Topic
	subj   bus.Subjects
	cfg    Config
	node   *Node
}

func newEnv(t *testing.T, o envOpts) *nodeEnv {
	t.Helper()
	if o.birth == 0 {
		o.birth = base - 10*second
	}
	if o.created == 0 {
		o.created = base - 5*second
	}
	e := &nodeEnv{t: t, log: testkit.Logger(t, slog.LevelWarn), clock: nodeClock{testkit.NewClock(int64(midTime))}, cat: meta.NewStaticCatalog()}
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true, MaxPayload: o.maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	t.Cleanup(srv.Shutdown)
	if e.nc, err = srv.Connect("test-client"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	if e.nodeNC, err = srv.Connect("test-node"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nodeNC.Close)
	birth := o.birth
	e.mem = slotstore.NewMem(slotstore.Options{Logger: e.log, Now: func() uint64 { return birth }})
	t.Cleanup(func() { _ = e.mem.Close() })
	e.store = e.mem
	if o.wrapStore != nil {
		e.store = o.wrapStore(e.mem)
	}
	if e.subj, err = bus.NewSubjects(testCluster); err != nil {
		t.Fatal(err)
	}
	e.topic = &meta.Topic{Name: testTopic, Partitions: 2, Params: noGrid(), Created: o.created,
		Ensembles: [][]string{{"a", "b", testNode, "c", "d", "e"}, {"a", "b", "c", "d", testNode, "e"}}}
	mustPut(t, e.cat, e.topic)
	// A topic whose ensembles do not hold the node.
	mustPut(t, e.cat, &meta.Topic{Name: "elsewhere", Partitions: 1, Params: noGrid(), Created: o.created,
		Ensembles: [][]string{{"a", "b", "c", "d", "e", "f"}}})
	e.cfg = Config{ID: testNode, Cluster: testCluster, Store: e.store, Conn: e.nodeNC, Catalog: e.cat,
		Logger: e.log, Now: e.clock.Now, OwnerIdle: o.ownerIdle, MaxPending: o.maxPending, Repair: RepairConfig{Disabled: true}}
	if o.repair != nil {
		e.cfg.Repair = *o.repair
	}
	e.start()
	return e
}

// start starts the node; cleanup stops it (a no-op after Kill or Stop).
func (e *nodeEnv) start() {
	e.t.Helper()
	n, err := Start(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.node = n
	// Subscribe is asynchronous: make sure the server has the node's
	// subscription before the test's first request.
	if err := e.nodeNC.Flush(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Stop(ctx)
	})
}

// noGrid is the default topic without an offset grid: these tests pick
// their offsets by hand (node_owner_grid_test.go tests the grid).
func noGrid() quorum.Params {
	p := quorum.Default()
	p.Grid = 0
	return p
}

func mustPut(t *testing.T, c *meta.StaticCatalog, tp *meta.Topic) {
	t.Helper()
	if err := c.Put(tp); err != nil {
		t.Fatal(err)
	}
}

// payloadFor returns a deterministic batch payload of size bytes for seq.
func payloadFor(seq uint64, size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(seq*31 + uint64(i)*7 + uint64(i>>8))
	}
	return p
}

// shards encodes stripe (testProducer, seq) at off with the default shape.
func shards(t testing.TB, seq, off uint64, payloadLen int) []stripe.Shard {
	t.Helper()
	s, err := stripe.Encode(stripe.ID{Producer: testProducer, Seq: seq}, off, 6, 4, payloadFor(seq, payloadLen))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// shardFor returns the marshalled shard of stripe seq at off that belongs
// on the test node in partition part.
func shardFor(t testing.TB, part int, seq, off uint64) []byte {
	t.Helper()
	return shardSized(t, part, seq, off, 400)
}

func shardSized(t testing.TB, part int, seq, off uint64, payloadLen int) []byte {
	t.Helper()
	s := shards(t, seq, off, payloadLen)[testNodePos[part]]
	return s.Marshal()
}

func (e *nodeEnv) slot(part uint32) string { return e.subj.Slot(testNode, testTopic, part) }

// request sends data on subject and returns the reply payload.
func (e *nodeEnv) request(subject string, data []byte) []byte {
	e.t.Helper()
	msg, err := e.nc.Request(subject, data, requestWait)
	if err != nil {
		e.t.Fatalf("request on %s: %v", subject, err)
	}
	return msg.Data
}

func decodeWrite(t testing.TB, b []byte) bus.WriteReply {
	t.Helper()
	r, err := bus.DecodeWriteReply(b)
	if err != nil {
		t.Fatalf("decode write reply: %v", err)
	}
	return r
}

func decodeScan(t testing.TB, b []byte) bus.ScanReply {
	t.Helper()
	r, err := bus.DecodeScanReply(b)
	if err != nil {
		t.Fatalf("decode scan reply: %v", err)
	}
	return r
}

// write sends one WriteReq for testTopic/part on its proper subject.
func (e *nodeEnv) write(part uint32, off uint64, shard []byte) bus.WriteReply {
	e.t.Helper()
	req := bus.WriteReq{Topic: testTopic, Partition: part, Offset: off, Shard: shard}
	return decodeWrite(e.t, e.request(e.slot(part), req.Marshal()))
}

func (e *nodeEnv) scan(q bus.ScanReq) bus.ScanReply {
	e.t.Helper()
	if q.Topic == "" {
		q.Topic = testTopic
	}
	return decodeScan(e.t, e.request(e.subj.Scan(testNode, q.Topic, q.Partition), q.Marshal()))
}

func expectStatus(t testing.TB, what string, got, want bus.Status, detail string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: status %s (detail %q), want %s", what, got, detail, want)
	}
}

// stored returns the shard the store holds at (testTopic, part, off).
func (e *nodeEnv) stored(part uint32, off uint64) ([]byte, error) {
	return e.mem.Get(slotstore.Key{Topic: testTopic, Partition: part, Offset: off})
}

// TestNodeWriteOnce: a slot takes one shard; the same shard again is a
// retry (OK), any other shard is a CONFLICT, and the store keeps the first.
func TestNodeWriteOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	off := midTime + 10*ms
	first := shardFor(t, 0, 1, off)

	r := e.write(0, off, first)
	expectStatus(t, "first write", r.Status, bus.StatusOK, r.Detail)
	if r.NodeClock != e.clock.Now() {
		t.Errorf("reply clock %d, want the node clock %d", r.NodeClock, e.clock.Now())
	}
	r = e.write(0, off, first)
	expectStatus(t, "same write again", r.Status, bus.StatusOK, r.Detail)

	other := shardFor(t, 0, 2, off)
	r = e.write(0, off, other)
	expectStatus(t, "other stripe, same offset", r.Status, bus.StatusConflict, r.Detail)
	if !strings.Contains(r.Detail, stripe.ID{Producer: testProducer, Seq: 1}.String()) {
		t.Errorf("conflict detail %q does not name the stripe holding the slot", r.Detail)
	}
	// Same stripe id and index but other bytes (a producer bug or a
	// forged shard) is not a retry either.
	forged := shards(t, 1, off, 999)[testNodePos[0]]
	r = e.write(0, off, forged.Marshal())
	expectStatus(t, "same id, other data", r.Status, bus.StatusConflict, r.Detail)

	got, err := e.stored(0, off)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, first) {
		t.Fatal("the store does not hold the first shard byte for byte")
	}
	// The other partition's slot at the same offset is a different slot.
	r = e.write(1, off, shardFor(t, 1, 2, off))
	expectStatus(t, "same offset, other partition", r.Status, bus.StatusOK, r.Detail)

	sc := e.scan(bus.ScanReq{Partition: 0, From: base, To: base + second})
	expectStatus(t, "scan", sc.Status, bus.StatusOK, sc.Detail)
	if len(sc.Entries) != 1 || sc.Entries[0].Offset != off || !bytes.Equal(sc.Entries[0].Shard, first) {
		t.Fatalf("scan returned %d entries, want exactly the first shard at %d", len(sc.Entries), off)
	}
	st := e.node.Stats()
	if w, c := st.Writes.Load(), st.Conflicts.Load(); w != 3 || c != 2 {
		t.Errorf("stats: %d writes, %d conflicts; want 3 and 2", w, c)
	}
}

// TestNodeTimeRules: the accept window, the future bound and the seal.
func TestNodeTimeRules(t *testing.T) {
	e := newEnv(t, envOpts{})
	now := e.clock.Now()
	A, F := uint64(e.topic.Params.AcceptWindow), uint64(e.topic.Params.FutureBound)
	seq := uint64(100)
	w := func(off uint64) bus.WriteReply {
		seq++
		return e.write(0, off, shardFor(t, 0, seq, off))
	}

	r := w(uint64(now) - A - 1)
	expectStatus(t, "offset just older than now-A", r.Status, bus.StatusSealed, r.Detail)
	r = w(uint64(now) - A)
	expectStatus(t, "offset at now-A", r.Status, bus.StatusOK, r.Detail)
	r = w(uint64(now) + F)
	expectStatus(t, "offset at now+F", r.Status, bus.StatusOK, r.Detail)
	r = w(uint64(now) + F + 1)
	expectStatus(t, "offset beyond now+F", r.Status, bus.StatusClockAhead, r.Detail)
	if r.NodeClock != now {
		t.Errorf("CLOCK_AHEAD carries node clock %d, want %d", r.NodeClock, now)
	}

	// A write accepted before the seal, retried after it, is still OK.
	early := base + 350*ms
	earlyShard := shardFor(t, 0, 7, early)
	r = e.write(0, early, earlyShard)
	expectStatus(t, "write before seal", r.Status, bus.StatusOK, r.Detail)

	seal := base + 400*ms
	sc := e.scan(bus.ScanReq{Partition: 0, From: base, To: seal, Seal: true})
	expectStatus(t, "sealing scan", sc.Status, bus.StatusOK, sc.Detail)
	if sc.Seal != seal {
		t.Errorf("scan reply seal %d, want %d", sc.Seal, seal)
	}
	if got, err := e.mem.Seal(testTopic, 0, base); err != nil || got != seal {
		t.Errorf("store seal %d (%v), want %d persisted", got, err, seal)
	}
	r = w(base + 300*ms)
	expectStatus(t, "write below the seal (inside the accept window)", r.Status, bus.StatusSealed, r.Detail)
	if !strings.Contains(r.Detail, "seal") {
		t.Errorf("SEALED detail %q does not mention the seal", r.Detail)
	}
	r = e.write(0, early, earlyShard)
	expectStatus(t, "retry of a write accepted before the seal", r.Status, bus.StatusOK, r.Detail)
	r = e.write(0, early, shardFor(t, 0, 8, early))
	expectStatus(t, "other stripe below the seal, occupied slot", r.Status, bus.StatusConflict, r.Detail)
	r = w(seal)
	expectStatus(t, "write at the seal (exclusive)", r.Status, bus.StatusOK, r.Detail)

	// A lower seal request never lowers the seal.
	sc = e.scan(bus.ScanReq{Partition: 0, From: base, To: base + 100*ms, Seal: true})
	expectStatus(t, "lower sealing scan", sc.Status, bus.StatusOK, sc.Detail)
	if sc.Seal != seal {
		t.Errorf("seal went from %d to %d", seal, sc.Seal)
	}
	// A reader may not seal the node's future.
	sc = e.scan(bus.ScanReq{Partition: 0, From: base, To: uint64(now) + 1, Seal: true})
	expectStatus(t, "sealing beyond the node clock", sc.Status, bus.StatusClockAhead, sc.Detail)
	if sc.NodeClock != now {
		t.Errorf("CLOCK_AHEAD scan carries clock %d, want %d", sc.NodeClock, now)
	}
	// Scanning (without sealing) the future is fine.
	sc = e.scan(bus.ScanReq{Partition: 0, From: base, To: base + second})
	expectStatus(t, "scan of the whole range, no seal", sc.Status, bus.StatusOK, sc.Detail)

	// Time moves on: what was acceptable is now too old.
	e.clock.Advance(time.Duration(second))
	r = w(uint64(now) + 100*ms)
	expectStatus(t, "offset fallen out of the accept window", r.Status, bus.StatusSealed, r.Detail)
	r = w(uint64(now) + second)
	expectStatus(t, "offset at the new now", r.Status, bus.StatusOK, r.Detail)

	st := e.node.Stats()
	if s, c := st.Sealed.Load(), st.ClockAhead.Load(); s != 3 || c != 1 {
		t.Errorf("stats: sealed %d, clock-ahead %d; want 3 and 1", s, c)
	}
}

// TestNodeBadRequests: every misrouted or malformed request is refused
// before it reaches an owner (or by the owner), counted, and stores nothing.
func TestNodeBadRequests(t *testing.T) {
	e := newEnv(t, envOpts{})
	off := midTime
	good := shardFor(t, 0, 1, off)
	wr := func(topic string, part uint32, o uint64, shard []byte) []byte {
		return bus.WriteReq{Topic: topic, Partition: part, Offset: o, Shard: shard}.Marshal()
	}
	crcData := append([]byte(nil), good...)
	crcData[len(crcData)-1] ^= 0x40
	crcHeader := append([]byte(nil), good...)
	crcHeader[30] ^= 0x01
	otherShape, err := stripe.Encode(stripe.ID{Producer: testProducer, Seq: 9}, off, 5, 3, payloadFor(9, 300))
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		subject string
		data    []byte
		scan    bool
		want    bus.Status
		detail  string
	}{
		{"payload partition differs from subject", e.slot(0), wr(testTopic, 1, off, good), false, bus.StatusBadRequest, "subject names"},
		{"payload topic differs from subject", e.slot(0), wr("elsewhere", 0, off, good), false, bus.StatusBadRequest, "subject names"},
		{"scan payload differs from subject", e.subj.Scan(testNode, testTopic, 1),
			bus.ScanReq{Topic: testTopic, Partition: 0, From: base, To: base + 1}.Marshal(), true, bus.StatusBadRequest, "subject names"},
		{"unknown topic", e.subj.Slot(testNode, "nope", 0), wr("nope", 0, off, good), false, bus.StatusBadRequest, `"nope"`},
		{"unknown topic (scan)", e.subj.Scan(testNode, "nope", 0),
			bus.ScanReq{Topic: "nope", From: base, To: base + 1}.Marshal(), true, bus.StatusBadRequest, `"nope"`},
		{"partition out of range", e.subj.Slot(testNode, testTopic, 7), wr(testTopic, 7, off, good), false, bus.StatusBadRequest, "partitions"},
		{"node outside the ensemble", e.subj.Slot(testNode, "elsewhere", 0), wr("elsewhere", 0, off, good), false, bus.StatusWrongNode, "not in the ensemble"},
		{"shard index is not the node's position", e.slot(0), wr(testTopic, 0, off, shards(t, 1, off, 400)[3].Marshal()), false, bus.StatusWrongNode, "position 2"},
		{"shard of partition 0 sent for partition 1", e.slot(1), wr(testTopic, 1, off, good), false, bus.StatusWrongNode, "position 4"},
		{"shard of another shape", e.slot(0), wr(testTopic, 0, off, otherShape[2].Marshal()), false, bus.StatusWrongNode, "n=5 k=3"},
		{"garbage payload", e.slot(0), []byte("hello, node"), false, bus.StatusBadRequest, "bad message"},
		{"empty payload", e.slot(0), nil, false, bus.StatusBadRequest, "bad message"},
		{"a reply is not a request", e.slot(0), bus.WriteReply{Status: bus.StatusOK}.Marshal(), false, bus.StatusBadRequest, "not a request"},
		{"truncated write request", e.slot(0), wr(testTopic, 0, off, good)[:40], false, bus.StatusBadRequest, "truncated"},
		{"corrupted shard data (CRC)", e.slot(0), wr(testTopic, 0, off, crcData), false, bus.StatusBadRequest, "CRC"},
		{"corrupted shard header (CRC)", e.slot(0), wr(testTopic, 0, off, crcHeader), false, bus.StatusBadRequest, "CRC"},
		{"not a shard", e.slot(0), wr(testTopic, 0, off, []byte("not a shard at all")), false, bus.StatusBadRequest, "corrupt shard"},
		{"shard offset differs from request offset", e.slot(0), wr(testTopic, 0, off+1, good), false, bus.StatusBadRequest, "shard says"},
		{"request offset in another range than the shard", e.slot(0), wr(testTopic, 0, off+second, good), false, bus.StatusBadRequest, "outside owner range"},
		{"malformed subject", e.subj.Slot(testNode, testTopic, 0) + ".extra", wr(testTopic, 0, off, good), false, bus.StatusBadRequest, "bad subject"},
		{"partition token not a number", "raidq." + testCluster + ".slot." + testNode + "." + testTopic + ".x", wr(testTopic, 0, off, good), false, bus.StatusBadRequest, "bad subject"},
		// Writes and scans have their own subjects (NATS permissions grant
		// them separately): the wrong kind on either is refused.
		{"write request on a scan subject", e.subj.Scan(testNode, testTopic, 0), wr(testTopic, 0, off, good), false, bus.StatusBadRequest, "write request on a scan subject"},
		{"scan request on a write subject", e.slot(0),
			bus.ScanReq{Topic: testTopic, Partition: 0, From: base, To: base + 1}.Marshal(), true, bus.StatusBadRequest, "scan request on a write subject"},
		{"repair flag from the wire", e.slot(0),
			bus.WriteReq{Topic: testTopic, Partition: 0, Offset: off, Repair: true, Shard: good}.Marshal(), false, bus.StatusBadRequest, "own repair loop"},
	}
	for i, c := range cases {
		reply := e.request(c.subject, c.data)
		var st bus.Status
		var detail string
		if c.scan {
			r := decodeScan(t, reply)
			st, detail = r.Status, r.Detail
		} else {
			r := decodeWrite(t, reply)
			st, detail = r.Status, r.Detail
		}
		if st != c.want || !strings.Contains(detail, c.detail) {
			t.Errorf("%s: %s %q, want %s with %q", c.name, st, detail, c.want, c.detail)
		}
		if got := e.node.Stats().BadRequests.Load(); got != int64(i+1) {
			t.Errorf("%s: BadRequests = %d after %d bad requests", c.name, got, i+1)
		}
	}
	// Every refusal is counted in one class (visible in status "counters").
	c := e.node.Stats().Snapshot()
	if c.Malformed+c.Mismatches+c.ForgedRepairs != c.BadRequests || c.ForgedRepairs != 1 || c.Mismatches < 11 || c.Malformed < 7 {
		t.Errorf("refusal classes: malformed %d + mismatches %d + forged repairs %d, bad requests %d", c.Malformed, c.Mismatches, c.ForgedRepairs, c.BadRequests)
	}
	for _, o := range []uint64{off, off + 1, off + second} {
		for p := uint32(0); p < 2; p++ {
			if _, err := e.stored(p, o); !errors.Is(err, slotstore.ErrNotFound) {
				t.Errorf("slot %d/%d after bad requests: %v, want not found", p, o, err)
			}
		}
	}
	if n := e.node.Stats().Writes.Load(); n != 0 {
		t.Errorf("%d writes counted for bad requests", n)
	}
	// The refused shards left the slot free for the real one.
	r := e.write(0, off, good)
	expectStatus(t, "good write after bad ones", r.Status, bus.StatusOK, r.Detail)
}

// TestStatusValuesAgree: core.Status values are bus.Status wire values.
func TestStatusValuesAgree(t *testing.T) {
	pairs := []struct {
		c core.Status
		b bus.Status
	}{
		{core.StatusOK, bus.StatusOK},
		{core.StatusConflict, bus.StatusConflict},
		{core.StatusSealed, bus.StatusSealed},
		{core.StatusClockAhead, bus.StatusClockAhead},
		{core.StatusBadRequest, bus.StatusBadRequest},
		{core.StatusStoreError, bus.StatusStoreError},
		{core.StatusBusy, bus.StatusBusy},
		{core.StatusUnknown, bus.StatusUnknown},
		{core.StatusWrongNode, bus.StatusWrongNode},
		{core.StatusClockOff, bus.StatusClockOff},
	}
	for _, p := range pairs {
		if uint8(p.c) != uint8(p.b) || p.c.String() != p.b.String() {
			t.Errorf("core %s=%d, bus %s=%d", p.c, uint8(p.c), p.b, uint8(p.b))
		}
		if bus.Status(p.c) != p.b || core.Status(p.b) != p.c {
			t.Errorf("cast of %s does not round-trip", p.c)
		}
	}
	// Exhaustively: every value named on one side is named the same on the
	// other, except NO_REPLY, which is client-side only and never on the wire.
	named := 0
	for v := 0; v < 256; v++ {
		c, b := core.Status(v), bus.Status(v)
		cNamed := !strings.HasPrefix(c.String(), "STATUS(")
		if c == core.StatusNoReply {
			if b.Valid() {
				t.Errorf("NO_REPLY (%d) is a valid wire status", v)
			}
			continue
		}
		if cNamed != b.Valid() {
			t.Errorf("status %d: core %q named=%v, bus %q valid=%v", v, c, cNamed, b, b.Valid())
			continue
		}
		if cNamed {
			named++
			if c.String() != b.String() {
				t.Errorf("status %d: core %q, bus %q", v, c, b)
			}
		}
	}
	if named != len(pairs) {
		t.Errorf("%d named wire statuses, the test lists %d", named, len(pairs))
	}
	if s := core.StatusNoReply.String(); s != "NO_REPLY" {
		t.Errorf("core.StatusNoReply is %q", s)
	}
}

// TestNodeBusy: beyond MaxPending requests inside the node, new ones are
// answered BUSY at once, and the held ones still complete.
func TestNodeBusy(t *testing.T) {
	e := newEnv(t, envOpts{maxPending: 2})
	// Held store: the first owner blocks loading (its barrier cannot
	// complete), so the first two writes stay pending inside the node.
	e.mem.Hold()
	type result struct {
		r   bus.WriteReply
		err error
	}
	results := make(chan result, 2)
	for i := uint64(0); i < 2; i++ {
		off := midTime + i*ms
		data := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: off, Shard: shardFor(t, 0, 10+i, off)}.Marshal()
		go func() {
			msg, err := e.nc.Request(e.slot(0), data, requestWait)
			if err != nil {
				results <- result{err: err}
				return
			}
			r, err := bus.DecodeWriteReply(msg.Data)
			results <- result{r, err}
		}()
	}
	testkit.WaitFor(t, "two requests pending in the node", func() bool { return e.node.pending.Load() == 2 })
	r := e.write(0, midTime+5*ms, shardFor(t, 0, 20, midTime+5*ms))
	expectStatus(t, "third request", r.Status, bus.StatusBusy, r.Detail)
	if b := e.node.Stats().Busy.Load(); b != 1 {
		t.Errorf("Busy = %d, want 1", b)
	}
	e.mem.Release()
	for i := 0; i < 2; i++ {
		res := <-results
		if res.err != nil {
			t.Fatal(res.err)
		}
		expectStatus(t, "held write", res.r.Status, bus.StatusOK, res.r.Detail)
	}
	r = e.write(0, midTime+5*ms, shardFor(t, 0, 20, midTime+5*ms))
	expectStatus(t, "the refused write, retried", r.Status, bus.StatusOK, r.Detail)
}

// taggedReply is the reply to the i-th request of publishRequests.
type taggedReply struct {
	i    int
	data []byte
}

// publishRequests publishes requests in order on the test connection and
// returns a channel of their replies.
func (e *nodeEnv) publishRequests(subject string, reqs ...[]byte) <-chan taggedReply {
	e.t.Helper()
	inbox := e.nc.NewRespInbox()
	out := make(chan taggedReply, len(reqs))
	sub, err := e.nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		var i int
		if _, err := fmt.Sscanf(m.Subject[len(inbox)+1:], "%d", &i); err == nil {
			out <- taggedReply{i, m.Data}
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	for i, r := range reqs {
		if err := e.nc.PublishRequest(subject, fmt.Sprintf("%s.%d", inbox, i), r); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func nextReply(t testing.TB, ch <-chan taggedReply) taggedReply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(requestWait):
		t.Fatal("no reply")
		return taggedReply{}
	}
}

// TestNodeRetryWaitsForDurability: OK means durable. A retry of a shard
// whose first write is still in the commit queue is answered only after
// that commit, never before (while a CONFLICT needs no store and is
// answered at once).
func TestNodeRetryWaitsForDurability(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.write(0, midTime, shardFor(t, 0, 1, midTime))
	expectStatus(t, "first write", r.Status, bus.StatusOK, r.Detail)

	e.mem.Hold()
	off := midTime + ms
	a := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: off, Shard: shardFor(t, 0, 2, off)}.Marshal()
	b := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: off, Shard: shardFor(t, 0, 3, off)}.Marshal()
	replies := e.publishRequests(e.slot(0), a, a, b)
	// The node answers in order on one connection: the CONFLICT, handled
	// after both writes of a, comes first only if neither was answered.
	first := nextReply(t, replies)
	if first.i != 2 {
		t.Fatalf("request %d answered first (%s) while its commit was held", first.i, decodeWrite(t, first.data).Status)
	}
	c := decodeWrite(t, first.data)
	expectStatus(t, "other stripe while the first is queued", c.Status, bus.StatusConflict, c.Detail)
	if _, err := e.stored(0, off); !errors.Is(err, slotstore.ErrNotFound) {
		t.Fatalf("slot durable while the store is held: %v", err)
	}
	e.mem.Release()
	for want := 0; want < 2; want++ {
		got := nextReply(t, replies)
		if got.i != want {
			t.Fatalf("reply %d, want %d (commit order)", got.i, want)
		}
		w := decodeWrite(t, got.data)
		expectStatus(t, "write and its retry after the commit", w.Status, bus.StatusOK, w.Detail)
	}
	if got, err := e.stored(0, off); err != nil || !bytes.Equal(got, shardFor(t, 0, 2, off)) {
		t.Fatalf("store after release: %v", err)
	}
}
