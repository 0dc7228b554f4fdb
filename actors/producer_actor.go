package actors

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/internal/actorsys"
	"github.com/raidq/raidq/actors/metrics"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// producerTickEvery is how often the producer checks attempt timeouts.
const producerTickEvery = 5 * time.Millisecond

// batch is an open or queued micro-batch of one partition.
type batch struct {
	recs   []stripe.Record
	cbs    []func(SendResult) // one per record, or the one of a whole batch
	bytes  int
	opened time.Time // first record added (ack latency)
	// whole: a SendBatch's batch, never merged; its one callback stands
	// for all its records and gets the stripe's first position.
	whole bool
	id    stripe.ID // a whole batch's given stripe id; zero: the producer's own
}

// records is how many records the batch's outcome settles (metrics).
func (b *batch) records() int {
	if b.whole {
		return len(b.recs)
	}
	return len(b.cbs)
}

// inflight is a stripe being written.
type inflight struct {
	partition int
	b         *batch
	payload   []byte
	shards    []stripe.Shard // encoded for the first attempt's offset
	released  bool           // its in-flight slot was freed (at ack or failure)
	committed uint64         // the offset it was acked at; 0: not (yet)
	// refused: its records failed with this refusal (producerActor.refuse);
	// its attempts are no longer sent, so the writer gives it up.
	refused error
	// settled, if set, is called once the writer holds nothing more of
	// the stripe (core.Done), or when the producer stops first (re-append
	// mode: Client.Reappend waits for it).
	settled func()
}

// partState is the producer's state for one partition.
type partState struct {
	writer *core.Writer
	open   *batch
	gen    uint64 // linger generation of the open batch
	queue  []*batch
	active int
	// unacked counts started stripes still waiting for their ack or
	// failure (the pipeline of ProducerConfig.Pipeline); target is the
	// size at which an open batch closes while the pipeline has room: at
	// the last ack, the records it released plus those already waiting.
	unacked int
	target  int
}

// shardTag identifies a shard request in a LinkResult.
type shardTag struct {
	partition int
	id        stripe.ID
	attempt   int
	node      int
}

// producerActor batches records per partition, encodes stripes, sends
// shards through the link actors and drives core.Writer with the replies
// (docs/design.md#write-path). Its state is lost on a restart, so it runs unsupervised:
// a panic here is a bug that fails the records in flight loudly.
//
// It is the one writer driver of package actors: a producer's batches
// and a node's re-append of an in-doubt stripe (Client.Reappend) both go
// through it. In re-append mode (reappend set) it starts that one stripe
// when it starts and takes no records.
type producerActor struct {
	c       *Client
	topic   *meta.Topic
	cfg     ProducerConfig
	id      stripe.ProducerID
	seq     uint64
	maxRecs int // records per stripe: the topic's grid, at most stripe.MaxRecords
	parts   []*partState
	stripes map[stripe.ID]*inflight
	rnd     *mrand.Rand
	sticky  int
	flushes []chan struct{}
	sched   *scheduler.TimerScheduler
	cancel  func()            // stops the attempt-timeout tick; nil while no stripe is in flight
	ticking atomic.Bool       // cancel != nil, for tests (read from other goroutines)
	m       *metrics.Producer // nil: no metrics
	// reappend, if set, is the one stripe this producer writes (re-append
	// mode, Client.Reappend): started at actor.Started.
	reappend *reappendReq
}

// reappendReq is the stripe of a producer in re-append mode: payload (a
// stripe's batch as stripe.AppendBatch made it) written as stripe id on
// partition. cb gets the outcome at the ack or failure, as a record's
// callback would (Pos.Offset: the committed offset); settled is called
// after cb, once the writer is done with the stripe or the producer stops.
type reappendReq struct {
	partition int
	id        stripe.ID
	payload   []byte
	cb        func(SendResult)
	settled   func()
}

func newProducerActor(c *Client, t *meta.Topic, cfg ProducerConfig) *producerActor {
	a := &producerActor{c: c, topic: t, cfg: cfg, stripes: make(map[stripe.ID]*inflight), rnd: newRand(cfg.Seed),
		m: c.metrics.Producer(t.Name), maxRecs: t.Params.MaxStripeRecords(stripe.MaxRecords)}
	_, _ = rand.Read(a.id[:])
	if a.id[0] == stripe.NumberedPrefix[0] {
		a.id[0] ^= 0x80 // never a record-numbered id (stripe.Numbered): those are a Kafka producer's
	}
	a.parts = make([]*partState, t.Partitions)
	for i := range a.parts {
		wc := cfg.Writer
		wc.Nodes = t.Ensembles[i]
		a.parts[i] = &partState{writer: core.NewWriter(wc), target: 1}
	}
	a.sticky = a.rnd.IntN(t.Partitions)
	return a
}

func (a *producerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.sched = scheduler.NewTimerScheduler(ctx)
		if r := a.reappend; r != nil {
			a.startReappend(ctx, r)
		}
	case *produce:
		a.add(ctx, m)
	case *produceBatch:
		a.addBatch(ctx, m)
	case *produceRun:
		a.addRun(ctx, m)
	case *lingerFire:
		if p := a.parts[m.partition]; p.open != nil && p.gen == m.gen {
			a.closeBatch(ctx, m.partition)
		}
	case *producerTick:
		now := a.c.cfg.Now()
		for i, p := range a.parts {
			a.apply(ctx, i, p.writer.Tick(now, a.rnd))
		}
	case *LinkResult:
		a.onResult(ctx, m)
	case *producerRefused:
		a.refuse(ctx, m.err)
	case *flushReq:
		a.flush(ctx, m.done)
	case *actor.Stopping:
		a.stopTicking()
		a.failAll(fmt.Errorf("producer of %s: %w", a.topic.Name, core.ErrClosed))
	}
}

// flush closes every open batch; done is closed once every record sent
// before has its outcome (checkFlushed).
func (a *producerActor) flush(ctx actor.Context, done chan struct{}) {
	for i := range a.parts {
		a.closeBatch(ctx, i)
	}
	a.flushes = append(a.flushes, done)
	a.checkFlushed()
}

// add puts a record into its partition's open batch.
func (a *producerActor) add(ctx actor.Context, m *produce) {
	part := m.partition
	if part < 0 || part >= a.topic.Partitions {
		part = partitionOf(m.rec.Key, a.topic.Partitions, a.sticky)
	}
	if err := stripe.CheckRecord(&m.rec); err != nil { // so it fails no batch it would join
		m.cb(SendResult{Partition: part, Err: fmt.Errorf("send to %s/%d: %w: %w", a.topic.Name, part, ErrInvalidMessage, err)})
		return
	}
	p := a.parts[part]
	if err := a.queueFull(part); err != nil {
		m.cb(SendResult{Partition: part, Err: err})
		return
	}
	if p.open == nil {
		p.open = &batch{opened: time.Now()}
		p.gen++
		a.sched.SendOnce(a.cfg.Linger, ctx.Self(), &lingerFire{partition: part, gen: p.gen})
	}
	p.open.recs = append(p.open.recs, m.rec)
	p.open.cbs = append(p.open.cbs, m.cb)
	p.open.bytes += m.rec.Size()
	if p.open.bytes >= a.cfg.MaxBatchBytes || len(p.open.recs) >= a.maxRecs || a.ready(p) {
		a.closeBatch(ctx, part)
	}
}

// queueFull is ErrBusy if part has MaxQueuedBatches closed batches waiting.
func (a *producerActor) queueFull(part int) error {
	if n := len(a.parts[part].queue); n >= a.cfg.MaxQueuedBatches {
		return fmt.Errorf("%w: %d batches queued for %s/%d", ErrBusy, n, a.topic.Name, part)
	}
	return nil
}

// addBatch queues a SendBatch's records as one whole batch behind the
// partition's open batch, which it closes first to keep the order.
func (a *producerActor) addBatch(ctx actor.Context, m *produceBatch) {
	a.addRun(ctx, &produceRun{partition: m.partition, batches: []*produceBatch{m}})
}

// addRun queues a run's batches together and starts them on one reading
// of the clock (startQueued), so that their offsets are consecutive grid
// cells. A batch that cannot be written fails the whole run first.
func (a *producerActor) addRun(ctx actor.Context, m *produceRun) {
	fail := func(err error) {
		for _, b := range m.batches {
			b.cb(SendResult{Partition: m.partition, Stripe: b.id, Err: err})
		}
	}
	for _, b := range m.batches {
		if err := a.checkBatch(b); err != nil {
			fail(err)
			return
		}
	}
	if len(m.batches) == 0 {
		return
	}
	if err := a.queueFull(m.partition); err != nil {
		fail(err)
		return
	}
	a.closeBatch(ctx, m.partition)
	p := a.parts[m.partition]
	for _, b := range m.batches {
		p.queue = append(p.queue, &batch{recs: b.recs, cbs: []func(SendResult){b.cb}, opened: time.Now(), whole: true, id: b.id})
	}
	a.startQueued(ctx, m.partition)
}

// checkBatch says why a SendBatch cannot be written (ErrInvalidMessage).
func (a *producerActor) checkBatch(m *produceBatch) error {
	where := fmt.Sprintf("send batch to %s/%d", a.topic.Name, m.partition)
	switch {
	case m.partition < 0 || m.partition >= a.topic.Partitions:
		return fmt.Errorf("%s: %w: the topic has %d partitions", where, ErrInvalidMessage, a.topic.Partitions)
	case len(m.recs) == 0 || len(m.recs) > a.maxRecs:
		return fmt.Errorf("%s: %w: %d records, must be 1..%d", where, ErrInvalidMessage, len(m.recs), a.maxRecs)
	case m.id != (stripe.ID{}) && m.id.Producer == a.id:
		return fmt.Errorf("%s: %w: stripe id %s is of this producer's own", where, ErrInvalidMessage, m.id)
	}
	if err := stripe.CheckBatch(m.recs); err != nil {
		return fmt.Errorf("%s: %w: %w", where, ErrInvalidMessage, err)
	}
	return nil
}

// ready reports whether p's open batch should close now rather than
// linger: the pipeline has room (fewer than Pipeline stripes await their
// ack, none queued) and the batch has reached its target.
func (a *producerActor) ready(p *partState) bool {
	return p.open != nil && p.unacked+len(p.queue) < a.cfg.Pipeline && len(p.open.recs) >= p.target
}

// closeBatch queues the open batch and starts what the in-flight limit allows.
func (a *producerActor) closeBatch(ctx actor.Context, part int) {
	p := a.parts[part]
	if p.open == nil {
		return
	}
	p.queue = append(p.queue, p.open)
	p.open = nil
	if len(a.parts) > 1 && a.cfg.Writer.Params.N > 0 {
		a.sticky = (a.sticky + 1) % len(a.parts)
	}
	a.startQueued(ctx, part)
}

// startQueued starts the queued batches the in-flight limit allows, on
// one reading of the clock: batches started together get consecutive
// offsets (SendRun).
func (a *producerActor) startQueued(ctx actor.Context, part int) {
	p := a.parts[part]
	now := a.c.cfg.Now()
	for len(p.queue) > 0 && p.active < a.cfg.MaxInflight {
		b := p.queue[0]
		p.queue = p.queue[1:]
		a.start(ctx, now, part, b)
	}
}

// start encodes a batch as a stripe and sends its first attempt.
func (a *producerActor) start(ctx actor.Context, now int64, part int, b *batch) {
	// Encode first (the batch straight into the shards' buffer), so a batch
	// that cannot be encoded fails before the writer knows of it; the
	// offset is only known once the writer starts the stripe.
	id := stripe.ID{Producer: a.id, Seq: a.seq + 1}
	if b.id != (stripe.ID{}) {
		id = b.id
		if st := a.stripes[id]; st != nil {
			a.rejoin(part, b, st)
			return
		}
	}
	shards, payload, err := stripe.EncodeRecords(id, 0, a.topic.Params.N, a.topic.Params.K, b.recs)
	if err != nil {
		a.finish(b, SendResult{Partition: part, Err: err})
		return
	}
	if id.Producer == a.id {
		a.seq++
	}
	a.begin(ctx, now, part, id, &inflight{partition: part, b: b, payload: payload, shards: shards})
}

// rejoin settles a whole batch whose given id the writer still holds: a
// retry of that batch, so the same stripe, which gets that stripe's
// outcome instead of a second write (the writer holds one state per id):
// at once if it was acked, else with it. The records are not compared,
// and counted once, with the stripe. The id on another partition is
// another stripe: it is refused with ErrBusy (and, refused before any
// write, not counted) until the first is done.
func (a *producerActor) rejoin(part int, b *batch, st *inflight) {
	switch {
	case st.partition != part || (st.b != nil && !st.b.whole):
		err := fmt.Errorf("send batch to %s/%d: %w: stripe %s is still being written to %s/%d",
			a.topic.Name, part, ErrBusy, b.id, a.topic.Name, st.partition)
		for _, cb := range b.cbs {
			cb(SendResult{Partition: part, Stripe: b.id, Err: err})
		}
	case st.b != nil:
		st.b.cbs = append(st.b.cbs, b.cbs...)
	case st.refused != nil: // refused, not acked: a retry meets the same refusal
		for _, cb := range b.cbs {
			cb(SendResult{Partition: part, Stripe: b.id, Err: st.refused})
		}
	default:
		for _, cb := range b.cbs {
			cb(SendResult{Partition: part, Pos: core.Position{Offset: st.committed}, Stripe: b.id})
		}
	}
}

// startReappend encodes the re-append mode's stripe (its given id and
// payload) and sends its first attempt, like start does a batch's: its
// outcome goes to r.cb as a one-record batch's would.
func (a *producerActor) startReappend(ctx actor.Context, r *reappendReq) {
	b := &batch{cbs: []func(SendResult){r.cb}, opened: time.Now()}
	shards, err := stripe.Encode(r.id, 0, a.topic.Params.N, a.topic.Params.K, r.payload)
	if err != nil {
		a.finish(b, SendResult{Partition: r.partition, Stripe: r.id, Err: fmt.Errorf("re-append to %s/%d: %w", a.topic.Name, r.partition, err)})
		r.settled()
		return
	}
	a.begin(ctx, a.c.cfg.Now(), r.partition, r.id, &inflight{partition: r.partition, b: b, payload: r.payload, shards: shards, settled: r.settled})
}

// begin hands an encoded stripe (st, shards encoded at offset 0) to its
// partition's writer and sends its first attempt.
func (a *producerActor) begin(ctx actor.Context, now int64, part int, id stripe.ID, st *inflight) {
	p := a.parts[part]
	send := p.writer.Start(now, id)
	for i := range st.shards {
		st.shards[i].Offset = send.Offset
	}
	p.active++
	p.unacked++
	a.stripes[id] = st
	a.tickWhileBusy(ctx)
	a.m.Attempt(false, false)
	a.sendShards(ctx, part, send)
}

// sendShards sends shard i of an attempt to ensemble[i].
func (a *producerActor) sendShards(ctx actor.Context, part int, s core.Send) {
	st := a.stripes[s.ID]
	if st.refused != nil {
		return // each attempt would only be refused again; it times out
	}
	shards := st.shards
	if shards[0].Offset != s.Offset {
		shards = stripe.Reshard(shards, s.Offset)
	}
	ens := a.topic.Ensembles[part]
	for i := range shards {
		// Marshal the shard straight into the request: one buffer, one copy.
		req := bus.WriteReq{Topic: a.topic.Name, Partition: uint32(part), Offset: s.Offset}
		size := shards[i].Size()
		data := req.AppendHead(make([]byte, 0, req.HeadSize(size)+size), size)
		data = shards[i].AppendTo(data)
		tag := shardTag{partition: part, id: s.ID, attempt: s.Attempt, node: i}
		l, err := a.c.link(ens[i])
		if err != nil {
			ctx.Send(ctx.Self(), &LinkResult{Tag: tag, Err: err})
			continue
		}
		l.send(a.c.subjects.Slot(ens[i], a.topic.Name, uint32(part)), data, ctx.Self(), tag)
	}
}

// onResult feeds one shard reply to the partition's writer.
func (a *producerActor) onResult(ctx actor.Context, m *LinkResult) {
	tag, ok := m.Tag.(shardTag)
	if !ok {
		return
	}
	status, clock := core.StatusNoReply, int64(0)
	if m.Err == nil {
		if r, err := bus.DecodeWriteReply(m.Data); err == nil {
			status, clock = core.Status(r.Status), r.NodeClock
		}
	}
	if status == core.StatusConflict {
		a.m.Conflict()
	}
	a.apply(ctx, tag.partition, a.parts[tag.partition].writer.Reply(a.c.cfg.Now(), a.rnd, tag.id, tag.attempt, tag.node, status, clock))
}

// apply carries out the writer's output in core.WriterOutput's order:
// acks, fails, sends, dones. (A Send of a stripe whose Ack came first,
// here or earlier, finds its batch gone: it is the §3.7 rewrite.)
func (a *producerActor) apply(ctx actor.Context, part int, out core.WriterOutput) {
	for _, e := range out.Acks {
		if st := a.stripes[e.ID]; st != nil && st.b != nil {
			recs := len(st.b.cbs)
			a.ack(st, e)
			a.acked(ctx, part, recs)
			a.release(ctx, part, st)
		}
	}
	for _, e := range out.Fails {
		if st := a.stripes[e.ID]; st != nil && st.b != nil {
			recs := len(st.b.cbs)
			a.finish(st.b, SendResult{Partition: part, Stripe: e.ID, Err: fmt.Errorf("send to %s/%d: %w", a.topic.Name, part, e.Err)})
			st.b = nil
			a.acked(ctx, part, recs)
			a.release(ctx, part, st)
		}
	}
	for _, e := range out.Sends {
		if st := a.stripes[e.ID]; st != nil {
			a.m.Attempt(st.b != nil, st.b == nil) // no batch left: the stripe was acked, this rewrites it
		}
		a.sendShards(ctx, part, e)
	}
	for _, e := range out.Done {
		if st := a.stripes[e.ID]; st != nil {
			delete(a.stripes, e.ID)
			a.release(ctx, part, st)
			if st.settled != nil {
				st.settled()
			}
		}
	}
	a.tickWhileBusy(ctx)
	a.checkFlushed()
}

// tickWhileBusy runs the attempt-timeout tick while any stripe is in the
// writers (a.stripes mirrors them until core.Done), and stops it when none
// is: Writer.Tick has nothing to do then, and an idle producer should not
// wake its process 200 times a second.
func (a *producerActor) tickWhileBusy(ctx actor.Context) {
	switch {
	case len(a.stripes) > 0 && a.cancel == nil:
		a.cancel = actorsys.Repeat(ctx.ActorSystem(), producerTickEvery, ctx.Self(), &producerTick{})
		a.ticking.Store(true)
	case len(a.stripes) == 0:
		a.stopTicking()
	}
}

func (a *producerActor) stopTicking() {
	if a.cancel != nil {
		a.cancel()
		a.cancel = nil
		a.ticking.Store(false)
	}
}

// acked takes a stripe of recs records out of the partition's pipeline.
// The callers it releases may send again: the open batch's target becomes
// what it holds plus recs, and if the pipeline has room and the batch has
// reached that, it closes. (Counting what the batch already holds keeps
// two groups of callers from staying out of phase in two half batches.)
func (a *producerActor) acked(ctx actor.Context, part, recs int) {
	p := a.parts[part]
	p.unacked--
	p.target = max(1, recs)
	if p.open != nil {
		p.target += len(p.open.recs)
	}
	if a.ready(p) {
		a.closeBatch(ctx, part)
	}
}

// release frees a stripe's in-flight slot once its outcome is known: a
// committed stripe may stay in the writer a while longer (listening for
// late refusals that call for a rewrite) without holding up the pipeline.
func (a *producerActor) release(ctx actor.Context, part int, st *inflight) {
	if st.released {
		return
	}
	st.released = true
	a.parts[part].active--
	a.startQueued(ctx, part)
}

// ack calls the callbacks of a committed stripe: record i's with Index i,
// a whole batch's one with Index 0 (its first record).
func (a *producerActor) ack(st *inflight, e core.Ack) {
	st.committed = e.Offset
	a.m.Acked(st.b.records(), time.Since(st.b.opened))
	for i, cb := range st.b.cbs {
		pos := core.Position{Offset: e.Offset}
		if !st.b.whole {
			pos.Index = uint32(i)
		}
		cb(SendResult{Partition: st.partition, Pos: pos, Stripe: e.ID})
	}
	st.b = nil
}

func (a *producerActor) finish(b *batch, r SendResult) {
	if r.Err != nil {
		a.m.Failed(b.records())
	}
	for _, cb := range b.cbs {
		cb(r)
	}
}

// checkFlushed releases flush waiters once nothing is open, queued or
// awaiting an outcome.
func (a *producerActor) checkFlushed() {
	if len(a.flushes) == 0 {
		return
	}
	for _, p := range a.parts {
		if p.open != nil || len(p.queue) > 0 {
			return
		}
	}
	for _, st := range a.stripes {
		if st.b != nil {
			return
		}
	}
	for _, d := range a.flushes {
		close(d)
	}
	a.flushes = nil
}

// refuse fails every record without an outcome with err (Refuse): the
// open and queued batches, and the stripes in flight, whose slots in the
// pipeline are freed; the writer keeps those stripes until it gives them
// up, but they are not sent again. A stripe acked already keeps its
// outcome.
func (a *producerActor) refuse(ctx actor.Context, err error) {
	for i, p := range a.parts {
		if p.open != nil {
			p.queue = append(p.queue, p.open)
			p.open = nil
		}
		for _, b := range p.queue {
			a.finish(b, SendResult{Partition: i, Stripe: b.id, Err: err})
		}
		p.queue = nil
	}
	for _, st := range a.stripes {
		if st.b == nil {
			continue // acked: its outcome stands
		}
		recs := len(st.b.cbs)
		b := st.b
		st.b, st.refused = nil, err
		a.finish(b, SendResult{Partition: st.partition, Stripe: b.id, Err: err})
		a.acked(ctx, st.partition, recs)
		a.release(ctx, st.partition, st)
	}
	a.checkFlushed()
}

// failAll fails every record without an outcome (the producer is stopping).
func (a *producerActor) failAll(err error) {
	for i, p := range a.parts {
		if p.open != nil {
			p.queue = append(p.queue, p.open)
			p.open = nil
		}
		for _, b := range p.queue {
			a.finish(b, SendResult{Partition: i, Err: err})
		}
		p.queue = nil
	}
	for _, st := range a.stripes {
		if st.b != nil {
			a.finish(st.b, SendResult{Partition: st.partition, Stripe: stripe.ID{}, Err: err})
			st.b = nil
		}
	}
	for _, st := range a.stripes {
		if st.settled != nil {
			st.settled()
			st.settled = nil
		}
	}
	for _, d := range a.flushes {
		close(d)
	}
	a.flushes = nil
}
