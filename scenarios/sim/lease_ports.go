package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/fanout"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// The ports of one holder process (an incarnation): the fanout package's
// Leases, Publisher and Readers, simulated. Methods run on the driver's
// goroutines; anything touching the simulation goes to the loop through
// bubble.post.

// pubEvery is how often, on average, the stand-in reader hands the
// publisher a record: after a wait drawn in [pubEvery/2, 3 pubEvery/2), so
// its deliveries never fall on the same instant as the holder's tickers
// (TTL/3 apart), which Go would order at random.
const pubEvery = 50 * int64(time.Millisecond)

// errDead: the process is gone; its calls reach nothing.
var errDead = errors.New("sim: process dead")

// incarnation is one holder process and its ports.
type incarnation struct {
	h    *holder
	tag  string // name.run: the caller name of its port calls
	seed uint64
	m    *fanout.Manager

	proc

	mu      sync.Mutex
	pubs    []int64 // true times of its publishes
	readers uint64  // stand-in readers started (only the hold goroutine starts them)
}

var (
	_ fanout.Leases    = (*incarnation)(nil)
	_ fanout.Publisher = (*incarnation)(nil)
	_ fanout.Readers   = (*incarnation)(nil)
)

func newIncarnation(h *holder, seed uint64) *incarnation {
	return &incarnation{h: h, proc: newProc(sprintf("%s.%d", h.name, h.runs)), seed: seed}
}

// clock is the holder's clock (fanout.Config.Now).
func (in *incarnation) clock() time.Time {
	return time.Unix(0, in.h.clk.at(in.h.s.bubble.trueNow()))
}

func (in *incarnation) published() []int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.pubs
}

// kvCall sends op through the simulated KV as this holder (proc.kv).
func (in *incarnation) kvCall(ctx context.Context, op kvOp, done func(kvReply)) kvReply {
	return in.kv(in.h.s, ctx, kvCall{client: in.h.name, op: op, fallback: time.Second,
		ctxErr: func(error) error { return errKVTimeout }, done: done})
}

func leaseKVKey(name string) string { return "lease." + name }

// kvErr turns the simulated KV's errors into the ones bus/meta returns.
func kvErr(err error, name string) error {
	if errors.Is(err, errKVFenced) {
		return fmt.Errorf("%w: lease %s", meta.ErrFenced, name)
	}
	return err
}

func (in *incarnation) ReadLease(ctx context.Context, name string) (meta.Lease, uint64, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvGet, key: leaseKVKey(name)}, nil)
	if rep.err != nil || !rep.found {
		return meta.Lease{}, 0, rep.err
	}
	return rep.entry.val.(meta.Lease), rep.entry.rev, nil
}

// writeLease is bus/meta's writeLease: Create at revision 0, else Update
// (compare-and-set).
func (in *incarnation) writeLease(ctx context.Context, name string, l meta.Lease, rev uint64) (uint64, error) {
	op := kvOp{kind: kvUpdate, key: leaseKVKey(name), val: l, rev: rev}
	if rev == 0 {
		op.kind = kvCreate
	}
	rep := in.kvCall(ctx, op, nil)
	return rep.rev, kvErr(rep.err, name)
}

func (in *incarnation) TakeLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time, rev uint64, data []byte) (meta.Lease, uint64, error) {
	l := meta.Lease{Holder: holder, Expires: now.Add(ttl).UnixNano(), Data: data}
	s := in.h.s
	op := kvOp{kind: kvUpdate, key: leaseKVKey(name), val: l, rev: rev}
	if rev == 0 {
		op.kind = kvCreate
	}
	rep := in.kvCall(ctx, op, func(rep kvReply) {
		if rep.err == nil {
			s.res.LeaseTakes++ // on the loop: the KV applied the take
		}
	})
	return l, rep.rev, kvErr(rep.err, name)
}

func (in *incarnation) RenewLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time, rev uint64, data []byte) (uint64, error) {
	return in.writeLease(ctx, name, meta.Lease{Holder: holder, Expires: now.Add(ttl).UnixNano(), Data: data}, rev)
}

func (in *incarnation) ReleaseLease(ctx context.Context, name, holder string, rev uint64, data []byte) error {
	_, err := in.writeLease(ctx, name, meta.Lease{Holder: holder, Expires: 0, Data: data}, rev)
	return err
}

// PublishMsg records a publish at the true time; a dead process's
// publishes go nowhere.
func (in *incarnation) PublishMsg(*nats.Msg) error {
	if in.isDead() {
		return errDead
	}
	t := in.h.s.bubble.trueNow()
	in.mu.Lock()
	in.pubs = append(in.pubs, t)
	in.mu.Unlock()
	return nil
}

func (in *incarnation) FlushTimeout(time.Duration) error {
	if in.isDead() {
		return errDead
	}
	return nil
}

func (in *incarnation) MaxPayload() int64 { return 1 << 20 }

// NewReader starts the stand-in reader: one record every pubEvery to the
// sink, from cfg.From, until closed.
func (in *incarnation) NewReader(cfg actors.ReaderConfig) (fanout.PartitionReader, error) {
	if in.isDead() {
		return nil, errDead
	}
	in.readers++
	r := &standIn{in: in, sink: cfg.Sink, pos: cfg.From, stop: make(chan struct{}), done: make(chan struct{}),
		rnd: rand.New(rand.NewPCG(in.seed, in.readers))}
	go r.run()
	return r, nil
}

// standIn is the holder's reader: data flows all the time.
type standIn struct {
	in   *incarnation
	sink func([]core.Delivery)
	mu   sync.Mutex
	pos  core.Position // next to deliver
	stop chan struct{}
	done chan struct{}
	once sync.Once
	rnd  *rand.Rand // its waits; only run uses it
}

func (r *standIn) run() {
	defer close(r.done)
	for {
		t := time.NewTimer(time.Duration(pubEvery/2 + r.rnd.Int64N(pubEvery)))
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		r.mu.Lock()
		d := core.Delivery{Pos: r.pos, Record: stripe.Record{Value: []byte("x")}}
		r.pos = core.Position{Offset: r.pos.Offset + 1}
		r.mu.Unlock()
		r.sink([]core.Delivery{d})
	}
}

func (r *standIn) LowWater() core.Position {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pos
}

func (r *standIn) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// logger writes the process's log lines into the op log, on the loop, in
// the order the calls are settled.
func (in *incarnation) logger() *slog.Logger {
	return slog.New(&opLogHandler{in: in})
}

// opLogHandler is an slog handler that posts Info and above to the op log.
type opLogHandler struct {
	in    *incarnation
	attrs []slog.Attr
}

func (h *opLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *opLogHandler) Handle(_ context.Context, r slog.Record) error {
	if h.in.isDead() {
		return nil // what a dead process's goroutines still say is never heard
	}
	var b strings.Builder
	b.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		if a.Key != "component" && a.Key != "node" && a.Key != "topic" && a.Key != "partition" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	line, in := b.String(), h.in
	in.h.s.bubble.postLog(in.tag, line, func() { in.h.s.log.add("%s: %s", in.tag, line) })
	return nil
}

func (h *opLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &opLogHandler{in: h.in, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *opLogHandler) WithGroup(string) slog.Handler { return h }
