package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// fakeNodes are the six nodes of a topic's ensembles as a responder on the
// slot subjects: every write is answered with status (OK unless set) and
// its shard kept, so a test sees the stripes a producer wrote, in the
// order they arrived.
type fakeNodes struct {
	status atomic.Uint32 // bus.Status of every answer; 0: OK
	mute   atomic.Bool   // n5 keeps its shards but never answers
	mu     sync.Mutex
	order  []stripe.ID                   // stripe ids by first arrival
	shards map[stripe.ID][]*stripe.Shard // by shard index
	offset map[stripe.ID]uint64          // the offset of its last attempt
}

// stripes returns the decoded records of every stripe written, in the
// order the stripes first arrived.
func (f *fakeNodes) stripes(t *testing.T) (ids []stripe.ID, recs [][]stripe.Record) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range f.order {
		payload, err := stripe.Decode(f.shards[id])
		if err != nil {
			t.Fatalf("stripe %s: %v", id, err)
		}
		rs, err := stripe.DecodeBatch(payload)
		if err != nil {
			t.Fatalf("stripe %s: %v", id, err)
		}
		ids, recs = append(ids, id), append(recs, rs)
	}
	return ids, recs
}

func (f *fakeNodes) serve(node int, m *nats.Msg) {
	req, err := bus.DecodeWriteReq(m.Data)
	if err != nil {
		return
	}
	sh, err := stripe.Parse(bytes.Clone(req.Shard))
	if err != nil {
		return
	}
	f.mu.Lock()
	if f.shards[sh.ID] == nil {
		f.order = append(f.order, sh.ID)
		f.shards[sh.ID] = make([]*stripe.Shard, sh.N)
	}
	f.shards[sh.ID][sh.Index] = &sh
	f.offset[sh.ID] = sh.Offset
	f.mu.Unlock()
	if node == 5 && f.mute.Load() {
		return
	}
	status := bus.Status(f.status.Load())
	if status == 0 {
		status = bus.StatusOK
	}
	_ = m.Respond(bus.WriteReply{Status: status, NodeClock: time.Now().UnixNano()}.Marshal())
}

// producerEnv is a client with a metrics registry, fake nodes for a topic
// "t" of two partitions with the default parameters (grid 1024), and a
// producer of it with cfg (Topic set here).
func producerEnv(t *testing.T, cfg ProducerConfig) (*Producer, *fakeNodes, *prometheus.Registry) {
	t.Helper()
	srv, err := natsserver.StartServer(natsserver.ServerOptions{InProcessOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nodes := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	top := &meta.Topic{Name: "t", Partitions: 2, Params: quorum.Default(), Ensembles: [][]string{nodes, nodes}, Created: 1}
	cat := meta.NewStaticCatalog()
	if err := cat.Put(top); err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect("nodes")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cnc, err := srv.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	reg := prometheus.NewRegistry()
	c, err := NewClient(ClientConfig{Cluster: "tc", Conn: cnc, Catalog: cat, Logger: testkit.Logger(t, slog.LevelWarn), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &fakeNodes{shards: make(map[stripe.ID][]*stripe.Shard), offset: make(map[stripe.ID]uint64)}
	for i, n := range nodes {
		if _, err := nc.Subscribe(c.Subjects().SlotAll(n), func(m *nats.Msg) { f.serve(i, m) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg.Topic = "t"
	p, err := c.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p, f, reg
}

// records is the producer's records_total counter for result.
func records(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "raidq_producer_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// outcomes collects SendResults and counts the callbacks.
type outcomes struct {
	mu  sync.Mutex
	got []SendResult
}

func (o *outcomes) cb(r SendResult) {
	o.mu.Lock()
	o.got = append(o.got, r)
	o.mu.Unlock()
}

func (o *outcomes) all() []SendResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

func flush(t *testing.T, p *Producer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func timedBatch(n int, base int64) []stripe.Record {
	recs := make([]stripe.Record, n)
	for i := range recs {
		recs[i] = stripe.Record{Key: []byte("k"), Value: []byte(fmt.Sprint("batch-", i)), Time: base + int64(i)}
	}
	return recs
}

// TestSendBatchOneStripe: SendBatch closes the open batch first, then
// writes its records as one stripe of their own under the given id; its
// callback is called once, at the ack, with the stripe's first position,
// and the metrics count its records.
func TestSendBatchOneStripe(t *testing.T) {
	p, f, reg := producerEnv(t, ProducerConfig{Linger: time.Hour, Pipeline: -1}) // only a close or Flush closes a batch
	var singles, whole outcomes
	for i := range 3 {
		p.Send(stripe.Record{Value: []byte(fmt.Sprint("single-", i))}, 1, singles.cb)
	}
	given := stripe.ID{Producer: stripe.ProducerID{0xaa}, Seq: 42}
	p.SendBatch(timedBatch(5, 1_700_000_000_000_000_000), 1, given, whole.cb)
	p.SendBatch(timedBatch(2, 0), 1, stripe.ID{}, whole.cb) // no time, the producer's own id
	flush(t, p)

	ids, recs := f.stripes(t)
	if len(ids) != 3 || len(recs[0]) != 3 || ids[1] != given || len(recs[1]) != 5 || len(recs[2]) != 2 {
		t.Fatalf("stripes %v with %d records: want own(3), %s(5), own(2)", ids, len(recs), given)
	}
	for i, r := range recs[1] {
		if r.Time != 1_700_000_000_000_000_000+int64(i) || string(r.Value) != fmt.Sprint("batch-", i) {
			t.Fatalf("batch record %d: %+v", i, r)
		}
	}
	if ids[2].Producer != ids[0].Producer || ids[2].Seq != ids[0].Seq+1 {
		t.Fatalf("own ids %s then %s: want consecutive", ids[0], ids[2])
	}
	s := singles.all()
	if len(s) != 3 {
		t.Fatalf("%d single outcomes", len(s))
	}
	for i, r := range s {
		if r.Err != nil || r.Stripe != ids[0] || r.Pos.Index != uint32(i) {
			t.Fatalf("single %d: %+v", i, r)
		}
	}
	w := whole.all()
	if len(w) != 2 {
		t.Fatalf("%d batch outcomes for 2 batches", len(w))
	}
	for i, r := range w {
		if r.Err != nil || r.Stripe != ids[i+1] || r.Partition != 1 || r.Pos.Index != 0 || r.Pos.Offset == 0 {
			t.Fatalf("batch %d: %+v", i, r)
		}
	}
	if !(s[0].Pos.Offset < w[0].Pos.Offset && w[0].Pos.Offset < w[1].Pos.Offset) {
		t.Fatalf("offsets %d, %d, %d: want the stripes in send order", s[0].Pos.Offset, w[0].Pos.Offset, w[1].Pos.Offset)
	}
	if n := records(t, reg, "acked"); n != 10 {
		t.Fatalf("%v records acked, want 10", n)
	}
}

// TestSendBatchRetry: a retry of a batch under its id while the producer
// still holds the stripe is not written again: queued behind it, it gets
// its outcome with it; after its ack (one node silent, so the writer
// waits for it until the link times out), at once.
func TestSendBatchRetry(t *testing.T) {
	wc := core.DefaultWriterConfig(quorum.Default())
	wc.CommittedWait = int64(time.Minute) // the link's timeout (5s) ends the wait for n5
	p, f, reg := producerEnv(t, ProducerConfig{Writer: wc})
	f.mute.Store(true)
	id := stripe.ID{Producer: stripe.ProducerID{0xbb}, Seq: 9}
	var o outcomes
	for range 2 {
		p.SendBatch(timedBatch(3, 5), 0, id, o.cb)
	}
	flush(t, p)
	p.SendBatch(timedBatch(3, 5), 0, id, o.cb) // acked, the writer still waits for n5
	flush(t, p)
	got := o.all()
	if len(got) != 3 {
		t.Fatalf("%d outcomes for 3 sends", len(got))
	}
	for i, r := range got {
		if r.Err != nil || r.Stripe != id || r.Pos != got[0].Pos || r.Pos.Index != 0 {
			t.Fatalf("send %d: %+v, want the first's %+v", i, r, got[0])
		}
	}
	if ids, _ := f.stripes(t); len(ids) != 1 {
		t.Fatalf("%d stripes written, want 1", len(ids))
	}
	if n := records(t, reg, "acked"); n != 3 {
		t.Fatalf("%v records acked, want the stripe's 3", n)
	}
	var other outcomes
	p.SendBatch(timedBatch(1, 5), 1, id, other.cb)
	flush(t, p)
	if got := other.all(); len(got) != 1 || !errors.Is(got[0].Err, ErrBusy) {
		t.Fatalf("the id to another partition while held: %+v, want ErrBusy", got)
	}
}

// TestSendBatchRefused: a batch the producer cannot write fails at once,
// once, with ErrInvalidMessage, and writes nothing.
func TestSendBatchRefused(t *testing.T) {
	p, f, _ := producerEnv(t, ProducerConfig{})
	own := func() stripe.ID { // the producer's own id, from a send
		var o outcomes
		p.Send(stripe.Record{Value: []byte("x")}, 0, o.cb)
		flush(t, p)
		return o.all()[0].Stripe
	}()
	cases := map[string]struct {
		recs []stripe.Record
		part int
		id   stripe.ID
	}{
		"no records":             {nil, 0, stripe.ID{}},
		"over the grid":          {timedBatch(p.MaxBatchRecords()+1, 0), 0, stripe.ID{}},
		"partition -1":           {timedBatch(1, 0), -1, stripe.ID{}},
		"partition 2 of 2":       {timedBatch(1, 0), 2, stripe.ID{}},
		"negative time":          {timedBatch(1, -5), 0, stripe.ID{}},
		"the producer's own id":  {timedBatch(1, 0), 0, stripe.ID{Producer: own.Producer, Seq: 1 << 40}},
		"too many headers":       {[]stripe.Record{{Headers: make([]stripe.Header, stripe.MaxHeaders+1)}}, 0, stripe.ID{}},
		"over the batch's bytes": {[]stripe.Record{{Value: make([]byte, stripe.MaxBatchBytes)}}, 0, stripe.ID{}},
	}
	for name, c := range cases {
		var o outcomes
		p.SendBatch(c.recs, c.part, c.id, o.cb)
		flush(t, p)
		if got := o.all(); len(got) != 1 || !errors.Is(got[0].Err, ErrInvalidMessage) {
			t.Errorf("%s: %+v, want one ErrInvalidMessage", name, got)
		}
	}
	if ids, _ := f.stripes(t); len(ids) != 1 {
		t.Fatalf("%d stripes written, want only the probe's", len(ids))
	}
	if p.MaxBatchRecords() != int(quorum.DefaultGrid) {
		t.Fatalf("MaxBatchRecords %d, want the grid %d", p.MaxBatchRecords(), quorum.DefaultGrid)
	}
	var o outcomes
	p.Send(stripe.Record{Time: -1}, 0, o.cb)
	flush(t, p)
	if got := o.all(); len(got) != 1 || !errors.Is(got[0].Err, ErrInvalidMessage) {
		t.Fatalf("a record with a negative time: %+v", got)
	}
}

// TestSendBatchFails: a batch that cannot commit fails its callback once,
// and the metrics count its records as failed.
func TestSendBatchFails(t *testing.T) {
	p, f, reg := producerEnv(t, ProducerConfig{})
	f.status.Store(uint32(bus.StatusConflict))
	var o outcomes
	p.SendBatch(timedBatch(7, 1), 0, stripe.ID{Producer: stripe.ProducerID{1}, Seq: 1}, o.cb)
	flush(t, p)
	if got := o.all(); len(got) != 1 || got[0].Err == nil {
		t.Fatalf("outcomes %+v, want one failure", got)
	}
	if n := records(t, reg, "failed"); n != 7 {
		t.Fatalf("%v records failed, want 7", n)
	}
}

// TestBatchClosesAtGrid: an open batch closes at the topic's grid, not at
// stripe.MaxRecords.
func TestBatchClosesAtGrid(t *testing.T) {
	p, f, _ := producerEnv(t, ProducerConfig{Linger: time.Hour, Pipeline: -1, MaxBatchBytes: stripe.MaxBatchBytes})
	grid := int(quorum.DefaultGrid)
	var o outcomes
	for range grid + 10 {
		p.Send(stripe.Record{Value: []byte("x")}, 0, o.cb)
	}
	flush(t, p)
	_, recs := f.stripes(t)
	if len(recs) != 2 || len(recs[0]) != grid || len(recs[1]) != 10 {
		sizes := make([]int, len(recs))
		for i := range recs {
			sizes[i] = len(recs[i])
		}
		t.Fatalf("stripes of %v records, want [%d 10]", sizes, grid)
	}
	for _, r := range o.all() {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}
