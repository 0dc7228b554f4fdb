package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	nodepkg "github.com/raidq/raidq/actors/node"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// The ports of one repair process (a node's life): nodepkg.RepairPorts over
// the simulated node. Methods run on the repair loop's goroutines; every
// one that touches the simulation hands a call to the event loop
// (bubble.post) and waits for its answer, the process's death or its
// context. Calls a process makes at one instant from several goroutines
// (a scan of every peer, the fetches of several fixes) are ordered by
// what they ask (the caller key), never by the Go scheduler.

// errNoResponders: a fail-fast node refused the request (NATS's "no
// responders").
var errNoResponders = errors.New("sim: no responders")

// repairProc is one repair process and its ports.
type repairProc struct {
	r      *repairer
	tag    string // n<i>.r<run>: the caller name of its port calls
	epoch  int    // the node life it runs in
	birth  uint64 // the store's incarnation birth for that life
	cancel context.CancelFunc
	dead   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	inDoubt func(subject string, data []byte) // its subscription (Subscribe)
	// wc is the process's client for re-appends (writer), made at the
	// first re-append and closed by die.
	wc *cproc
}

var _ nodepkg.RepairPorts = (*repairProc)(nil)

// die ends the process: its calls fail at once, its context is done.
func (p *repairProc) die() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.dead)
		wc := p.wc
		p.mu.Unlock()
		p.cancel()
		if wc != nil {
			wc.bus.close() // what the crashed process sent no longer gets answers
			p.r.s.bubble.wg.Go(wc.close)
		}
	})
}

// writer is the process's client for re-appends (on a driver goroutine),
// on the node's clock; nil once the process is dead.
func (p *repairProc) writer() *actors.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isDead() {
		return nil
	}
	if p.wc == nil {
		s, skew := p.r.s, p.r.n.skew
		b := s.bubble
		wc, err := s.newClientProc(p.tag+".w", s.repair.catalog, func() int64 { return b.trueNow() + skew })
		if err != nil {
			panic(sprintf("sim: %s: client: %v", p.tag, err)) // the config is the simulation's own
		}
		p.wc = wc
	}
	return p.wc.client
}

func (p *repairProc) isDead() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

// live (on the loop): the process's node life goes on; a process whose
// node crashed is killed here, so nothing it does afterwards is seen.
func (p *repairProc) live() bool {
	n := p.r.n
	if p.r.proc == p && n.epoch == p.epoch && n.up && !p.isDead() {
		return true
	}
	p.die()
	return false
}

// call runs fn on the loop if the process is alive then; key tells its
// calls of one instant apart.
func (p *repairProc) call(key string, fn func()) {
	s := p.r.s
	s.bubble.post(p.tag+" "+key, 0, func() {
		if p.live() {
			s.refreshCatalog()
			fn()
		}
	})
}

// onLoop runs fn on the loop and waits for the value it answers with,
// ctx (nil: none) or the process's death.
func onLoop[T any](ctx context.Context, p *repairProc, key string, fn func(answer func(T))) (T, error) {
	var zero T
	if p.isDead() {
		return zero, errDead
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ch := make(chan T, 1)
	p.call(key, func() {
		fn(func(v T) {
			select {
			case ch <- v:
			default:
			}
		})
	})
	select {
	case v := <-ch:
		return v, nil
	case <-p.dead:
		return zero, errDead
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

func (p *repairProc) ID() string            { return nodeName(p.r.n.id) }
func (p *repairProc) Catalog() meta.Catalog { return p.r.s.repair.catalog }
func (p *repairProc) ClockOff() bool        { return false } // the clock watch is not simulated
func (p *repairProc) Birth() uint64         { return p.birth }

func (p *repairProc) Now() int64 {
	v, err := onLoop(nil, p, "now", func(answer func(int64)) { answer(p.r.n.clock()) })
	if err != nil {
		return p.r.s.bubble.trueNow() // dead: never used
	}
	return v
}

type markAnswer struct {
	v     uint64
	holes []uint64
}

func (p *repairProc) Mark(kind slotstore.MarkKind, _ string, _ uint32) (uint64, error) {
	a, err := onLoop(nil, p, "mark", func(answer func(markAnswer)) {
		r := p.r
		r.sync()
		switch kind {
		case slotstore.MarkRepaired:
			answer(markAnswer{v: r.repaired})
		case slotstore.MarkVerified:
			answer(markAnswer{v: r.verified})
		default:
			answer(markAnswer{v: r.dropped})
		}
	})
	return a.v, err
}

func (p *repairProc) Holes(_ string, _ uint32, from, to uint64) ([]uint64, error) {
	a, err := onLoop(nil, p, "holes", func(answer func(markAnswer)) {
		r := p.r
		r.sync()
		var out []uint64
		for _, h := range r.holes {
			if h >= from && h < to {
				out = append(out, h)
			}
		}
		answer(markAnswer{holes: out})
	})
	return a.holes, err
}

// Scan reads the node's durable slots of [from, to).
func (p *repairProc) Scan(_ string, _ uint32, from, to uint64, fn func(uint64, []byte) bool) error {
	es, err := onLoop(nil, p, "scan", func(answer func([]core.Entry)) { answer(p.r.n.slotsIn(from, to)) })
	if err != nil {
		return err
	}
	for _, e := range es {
		if !fn(e.Offset, e.Shard) {
			break
		}
	}
	return nil
}

func (p *repairProc) Get(k slotstore.Key) ([]byte, error) {
	b, err := onLoop(nil, p, sprintf("get %d", k.Offset), func(answer func([]byte)) {
		answer(p.r.n.disk[core.RangeStart(k.Offset)][k.Offset])
	})
	switch {
	case err != nil:
		return nil, err
	case b == nil:
		return nil, slotstore.ErrNotFound
	}
	return b, nil
}

// SaveMarks makes the marks and holes durable with the node's group
// commit, behind every repair write queued before them.
func (p *repairProc) SaveMarks(ctx context.Context, _ string, _ uint32, kind slotstore.MarkKind, mark uint64, holes []uint64) error {
	_, err := onLoop(ctx, p, "marks", func(answer func(bool)) {
		r, s := p.r, p.r.s
		r.n.durable(func() {
			r.sync()
			if len(holes) > 0 {
				merged := slices.Concat(r.holes, holes)
				slices.Sort(merged)
				merged = slices.Compact(merged)
				s.res.Holes += len(merged) - len(r.holes)
				r.holes = merged
			}
			switch kind {
			case slotstore.MarkRepaired:
				r.repaired = max(r.repaired, mark)
			case slotstore.MarkVerified:
				r.verified = max(r.verified, mark)
			default:
				r.dropped = max(r.dropped, mark)
			}
			s.log.add("n%d repair: %s mark %s, %d new holes durable", r.n.id, kind, s.log.off(mark), len(holes))
			answer(true)
		})
	})
	return err
}

// Request sends a repair scan (bus.ScanReq) to another node as simulated
// messages and waits up to timeout (an actors.ErrLinkTimeout).
func (p *repairProc) Request(ctx context.Context, to, _ string, data []byte, timeout time.Duration) ([]byte, error) {
	q, err := bus.DecodeScanReq(data)
	if err != nil {
		return nil, err
	}
	var peer *node
	for _, n := range p.r.s.nodes {
		if nodeName(n.id) == to {
			peer = n
		}
	}
	if peer == nil {
		return nil, fmt.Errorf("sim: no node %q", to)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type reply struct {
		b   []byte
		err error
	}
	key := sprintf("req %s %d-%d h=%v p=%v", to, q.From, q.To, q.HeadersOnly, q.Probe)
	rep, err := onLoop(ctx, p, key, func(answer func(reply)) {
		p.r.ask(p, peer, q, func(b []byte, err error) { answer(reply{b, err}) })
	})
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("node %s: %w", to, actors.ErrLinkTimeout)
	case err != nil:
		return nil, err
	}
	return rep.b, rep.err
}

// ask sends one repair scan to peer; answer runs on the loop with the
// reply, if the process is still alive then.
func (r *repairer) ask(p *repairProc, peer *node, q bus.ScanReq, answer func([]byte, error)) {
	s, n := r.s, r.n
	slow := n.slow || peer.slow
	what := func() string {
		return sprintf("n%d->n%d repair scan [%s,%s)", n.id, peer.id, s.log.off(q.From), s.log.off(q.To))
	}
	s.send(slow, what, func() {
		peer.repairScan(n, slow, q, func(b []byte, err error) {
			if p.live() {
				answer(b, err)
			}
		})
	})
}

// repairScan serves another node's repair scan (no seal: repair looks
// only behind every accept window): OK with the durable slots (headers
// only if asked), or, below a reborn node's repaired mark, UNKNOWN with
// what it has; the node's clock in every reply.
func (n *node) repairScan(from *node, slow bool, q bus.ScanReq, answer func([]byte, error)) {
	s := n.s
	reply := func(rep bus.ScanReply) {
		b := rep.Marshal()
		s.send(slow, func() string { return sprintf("n%d->n%d repair scan reply", n.id, from.id) }, func() { answer(b, nil) })
	}
	if n.down(func() string { return sprintf("repair scan from n%d", from.id) }, func() { answer(nil, errNoResponders) }) {
		return
	}
	o := n.owner(core.RangeStart(q.From))
	s.refreshRepaired(n, o)
	d := o.Scan(n.clock(), q.From, q.To, false)
	if d.Status != core.StatusOK {
		reply(bus.ScanReply{Status: bus.Status(d.Status), NodeClock: n.clock(), Next: q.To})
		return
	}
	n.after(max(n.synced, s.now), func() {
		rep := bus.ScanReply{Status: bus.StatusOK, NodeClock: n.clock(), Next: q.To, Birth: n.birth}
		if d.Unknown {
			rep.Status = bus.StatusUnknown
		}
		for _, e := range n.slotsIn(q.From, q.To) {
			b := e.Shard
			if q.HeadersOnly && len(b) > stripe.HeaderSize {
				b = b[:stripe.HeaderSize]
			}
			rep.Entries = append(rep.Entries, bus.ScanEntry{Offset: e.Offset, Shard: b})
		}
		if q.Probe {
			rep.After = n.firstAfter(q.To)
		}
		reply(rep)
	})
}

// slotsIn lists the durable slots of [from, to), in offset order.
func (n *node) slotsIn(from, to uint64) []core.Entry {
	var out []core.Entry
	for lo, slots := range n.disk {
		if lo+core.RangeNanos <= from || lo >= to {
			continue
		}
		for off, b := range slots {
			if off >= from && off < to {
				out = append(out, core.Entry{Offset: off, Shard: b})
			}
		}
	}
	slices.SortFunc(out, func(a, b core.Entry) int {
		switch {
		case a.Offset < b.Offset:
			return -1
		case a.Offset > b.Offset:
			return 1
		}
		return 0
	})
	return out
}

// RepairWrite hands a rebuilt shard to the node's owner (after the proof
// check) and answers once it is durable.
func (p *repairProc) RepairWrite(ctx context.Context, _ *meta.Topic, _ uint32, shard []byte) (bus.Status, string, error) {
	h, err := stripe.ParseHeader(shard)
	if err != nil {
		return 0, "", err
	}
	st, err := onLoop(ctx, p, sprintf("repair-write %d", h.Offset), func(answer func(core.Status)) {
		s, n := p.r.s, p.r.n
		s.checkRebuilt(n, shard)
		n.repairWrite(shard, func(st core.Status) {
			s.log.add("n%d repair write %s %s -> %s", n.id, sid(h.ID), s.log.off(h.Offset), st)
			answer(st)
		})
	})
	if err != nil {
		return 0, "", err
	}
	return bus.Status(st), "", nil
}

// repairWrite carries out core.Owner.RepairWrite for a rebuilt shard:
// answered once durable (the owner actor's repairWrite, still a copy).
func (n *node) repairWrite(b []byte, done func(core.Status)) {
	s := n.s
	sh, err := stripe.Parse(b)
	if err != nil {
		s.violate("n%d: repair rebuilt an unreadable shard: %v", n.id, err)
		done(core.StatusBadRequest)
		return
	}
	off := sh.Offset
	d := n.owner(core.RangeStart(off)).RepairWrite(n.clock(), off, &sh.ShardHeader, s.cfg.inject.repairReplace)
	switch {
	case d.Persist:
		n.repairAccepted(off, sh)
		n.durable(func() {
			n.store(off, b)
			s.res.RepairedShards++
			s.repair.lastWrite = s.now
			if _, ok := s.repair.wrote[repairSlot{n.id, off}]; !ok {
				s.repair.wrote[repairSlot{n.id, off}] = s.now
			}
			done(core.StatusOK)
		})
	case d.Barrier:
		n.after(max(n.synced, s.now), func() { done(core.StatusOK) })
	default:
		done(d.Status)
	}
}

// Reappend writes an in-doubt stripe again through the shipped
// actors.Client.Reappend (the producer actor in re-append mode) over the
// process's own bus, and returns its committed offset.
func (p *repairProc) Reappend(ctx context.Context, t *meta.Topic, partition uint32, id stripe.ID, payload []byte) (uint64, error) {
	c := p.writer()
	if c == nil {
		return 0, errDead
	}
	p.call("reappend "+sid(id), func() { p.r.s.log.add("n%d repair: re-append in-doubt %s", p.r.n.id, sid(id)) })
	off, err := c.Reappend(ctx, t, partition, id, payload)
	if err != nil {
		p.call("reappend "+sid(id)+" failed", func() { p.r.s.log.add("%s.w FAIL %s: %v", p.tag, sid(id), err) })
		return 0, err
	}
	p.call("reappend "+sid(id)+" acked", func() {
		s := p.r.s
		s.res.Reappended++
		s.repair.lastWrite = s.now
		s.log.add("%s.w ACK %s %s", p.tag, sid(id), s.log.off(off))
	})
	return off, nil
}

func (p *repairProc) Subscribe(_ string, fn func(string, []byte)) (func(), error) {
	p.mu.Lock()
	p.inDoubt = fn
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.inDoubt = nil
		p.mu.Unlock()
	}, nil
}

// Publish sends an in-doubt hand-over to every node, each a lossy message.
func (p *repairProc) Publish(subject string, data []byte) error {
	_, err := onLoop(nil, p, "publish "+subject, func(answer func(bool)) {
		s, n := p.r.s, p.r.n
		for _, to := range s.nodes {
			s.send(n.slow || to.slow, func() string { return sprintf("n%d->n%d in-doubt hand-over", n.id, to.id) },
				func() { s.deliverInDoubt(to, subject, data) })
		}
		answer(true)
	})
	return err
}

// deliverInDoubt hands an in-doubt report to the node's repair process,
// if it runs and listens (a down node misses it).
func (s *sim) deliverInDoubt(n *node, subject string, data []byte) {
	p := s.repair.nodes[n.id].proc
	if p == nil || !p.live() {
		return
	}
	p.mu.Lock()
	fn := p.inDoubt
	p.mu.Unlock()
	if fn != nil {
		fn(subject, data)
	}
}

// passed: a pass ran to its end (RepairLoopConfig.Passed).
func (p *repairProc) passed(start time.Time) {
	s := p.r.s
	at := epoch0 + int64(start.Sub(s.bubble.base))
	s.bubble.post(p.tag+" passed", 0, func() {
		if p.live() {
			p.r.passed(at)
		}
	})
}

// logger writes the process's log lines (Info and above) into the op log.
func (p *repairProc) logger() *slog.Logger { return slog.New(&repairLogHandler{p: p}) }

type repairLogHandler struct {
	p     *repairProc
	attrs []slog.Attr
}

func (h *repairLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *repairLogHandler) Handle(_ context.Context, r slog.Record) error {
	p := h.p
	if p.isDead() {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		if a.Key != "topic" && a.Key != "partition" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	line, s := b.String(), p.r.s
	s.bubble.postLog(p.tag, line, func() {
		if p.live() {
			s.log.add("%s: %s", p.tag, line)
		}
	})
	return nil
}

func (h *repairLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &repairLogHandler{p: h.p, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *repairLogHandler) WithGroup(string) slog.Handler { return h }
