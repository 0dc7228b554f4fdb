package sim

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/drillhooks"
	"github.com/raidq/raidq/bus/meta"
)

// The ports of one member process (minc): meta.GroupKV over the simulated
// KV, the partition readers (holding: the shipped reader over the
// simulated bus, feeding the member's sink) and the logger. Methods run on the process's goroutines;
// what touches the simulation goes to the loop through bubble.post.

// kvCall sends op through the simulated KV as this process (proc.kv).
func (in *minc) kvCall(ctx context.Context, op kvOp) kvReply {
	return in.kv(in.m.s, ctx, kvCall{client: in.m.name, op: op, fallback: time.Second,
		ctxErr: func(err error) error { return fmt.Errorf("%w: %w", errKVTimeout, err) }})
}

func posKey(p int) string { return posPrefix + strconv.Itoa(p) }

func (in *minc) GroupHeartbeat(ctx context.Context, group, topic, member string, now time.Time, session time.Duration) error {
	return in.kvCall(ctx, kvOp{kind: kvPut, key: memberPrefix + member, val: memberRec{heartbeat: now.UnixNano(), session: int64(session)}}).err
}

func (in *minc) GroupBeats(ctx context.Context, group, topic string) (map[string]meta.MemberBeat, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvList, key: memberPrefix})
	if rep.err != nil {
		return nil, rep.err
	}
	out := make(map[string]meta.MemberBeat, len(rep.list))
	for k, e := range rep.list {
		out[k[len(memberPrefix):]] = meta.MemberBeat{Revision: e.rev, Session: time.Duration(e.val.(memberRec).session)}
	}
	return out, nil
}

func (in *minc) GroupBeat(ctx context.Context, group, topic, member string) (meta.MemberBeat, bool, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvGet, key: memberPrefix + member})
	if rep.err != nil || !rep.found {
		return meta.MemberBeat{}, false, rep.err
	}
	return meta.MemberBeat{Revision: rep.entry.rev, Session: time.Duration(rep.entry.val.(memberRec).session)}, true, nil
}

func (in *minc) GroupPositions(ctx context.Context, group, topic string) (map[int]meta.PositionEntry, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvList, key: posPrefix})
	if rep.err != nil {
		return nil, rep.err
	}
	out := make(map[int]meta.PositionEntry, len(rep.list))
	for k, e := range rep.list {
		p, err := strconv.Atoi(k[len(posPrefix):])
		if err != nil {
			continue
		}
		out[p] = meta.PositionEntry{Pos: e.val.(meta.GroupPosition), Rev: e.rev}
	}
	return out, nil
}

func (in *minc) Position(ctx context.Context, group, topic string, p int) (meta.GroupPosition, uint64, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvGet, key: posKey(p)})
	if rep.err != nil || !rep.found {
		return meta.GroupPosition{}, 0, rep.err
	}
	return rep.entry.val.(meta.GroupPosition), rep.entry.rev, nil
}

// CommitPosition is bus/meta's: Create at revision 0, else Update. The
// checks see it when the loop sends it (issued) and when the KV applies
// it (applied).
func (in *minc) CommitPosition(ctx context.Context, group, topic string, p int, pos meta.GroupPosition, rev uint64) (uint64, error) {
	g := in.m.g
	op := kvOp{kind: kvUpdate, key: posKey(p), val: pos, rev: rev}
	if rev == 0 {
		op.kind = kvCreate
	}
	op.issued = func() { g.issued(in, p, pos) }
	op.applied = func() { g.applied(in, p, pos) }
	rep := in.kvCall(ctx, op)
	if rep.err == errKVFenced {
		s := in.m.s
		s.bubble.post(in.tag, in.calls.Add(1), func() { s.res.Fenced++ })
		return 0, fmt.Errorf("%w: group %s topic %s partition %d", meta.ErrFenced, group, topic, p)
	}
	return rep.rev, rep.err
}

func (in *minc) LeaveGroup(ctx context.Context, group, topic, member string) error {
	return in.kvCall(ctx, kvOp{kind: kvDelete, key: memberPrefix + member}).err
}

func (in *minc) KafkaGroupExists(ctx context.Context, name string) (bool, error) {
	rep := in.kvCall(ctx, kvOp{kind: kvGet, key: "kafka." + name})
	return rep.found, rep.err
}

// holding is one partition reader of a member process: the shipped
// reader (reader.go's reader process: actors.Client.NewReader over the
// simulated bus, on the member's skewed and drifting clock) whose Sink is
// the member's sink; the reader scans no further until it returns.
// LowWater and Handed are the shipped reader's.
type holding struct {
	m       *member
	in      *minc
	p       int
	gen     int // numbers the group's readers
	r       *reader
	stopped bool            // closed (or its process died): loop-owned
	pending []core.Delivery // the batch in the sink: loop-owned
	maxNext core.Position   // after the highest position it delivered (loop-owned)
	sink    func([]core.Delivery)
	proc    *rproc // its reader process (set on the loop before NewReader returns)
}

// NewReader starts the shipped reader of cfg.Partition from cfg.From in
// a reader process of its own, on the loop.
func (in *minc) NewReader(cfg actors.ReaderConfig) (drillhooks.PartitionReader, error) {
	if in.isDead() {
		return nil, errDead
	}
	s, g := in.m.s, in.m.g
	h := &holding{m: in.m, in: in, p: cfg.Partition, sink: cfg.Sink}
	done := make(chan struct{})
	s.bubble.post(in.tag, in.calls.Add(1), func() {
		g.startReader(h, cfg)
		close(done)
	})
	select {
	case <-done:
	case <-in.dead:
		return nil, errDead
	}
	if h.proc == nil {
		return nil, errDead
	}
	return h, nil
}

// startReader starts h's reader process (on the loop).
func (g *group) startReader(h *holding, cfg actors.ReaderConfig) {
	s, m := g.s, h.m
	g.gens++
	h.gen = g.gens
	from := cfg.From
	h.r = &reader{s: s, id: -1, name: sprintf("%s.p%d#%d", h.in.id, h.p, h.gen), skew: m.skew, start: from,
		r: newReaderView(s, from), resumes: []core.Position{from}, started: []int64{s.now}, open: map[uint64]bool{}, member: h}
	h.in.last[h.p] = h
	if h.in.isDead() {
		h.stopped = true
		return
	}
	if m.inc == h.in {
		m.parts[h.p] = h
	}
	s.log.add("%s reads p%d from %s", h.r.name, h.p, s.log.pos(from))
	h.proc = h.r.startProc(from, h.take)
}

// take is the reader's Sink (on its sink goroutine): the batch goes to
// the member's sink; the loop sees it handed over and taken.
func (h *holding) take(p *rproc, ds []core.Delivery) {
	p.post(func() { h.handing(ds) })
	h.sink(ds)
	p.post(func() { h.pending = nil })
}

// handing: the reader hands ds to the member's sink (on the loop).
func (h *holding) handing(ds []core.Delivery) {
	if h.stopped {
		return
	}
	for _, d := range ds {
		h.maxNext = maxPos(h.maxNext, core.Position{Offset: d.Pos.Offset, Index: d.Pos.Index + 1})
	}
	h.pending = ds
}

func (h *holding) LowWater() core.Position { return h.proc.rd.LowWater() }

func (h *holding) Handed() uint64 { return h.proc.rd.Handed() }

// Close stops the reader: on the loop (unless the process is dead: its
// readers stopped with it), then its process, here.
func (h *holding) Close() {
	in := h.in
	if !in.isDead() {
		done := make(chan struct{})
		in.m.s.bubble.post(in.tag, in.calls.Add(1), func() {
			h.stop()
			close(done)
		})
		select {
		case <-done:
		case <-in.dead:
		}
	}
	h.proc.close()
}

// stop ends the reader (on the loop); its process closes on a goroutine
// of its own.
func (h *holding) stop() {
	if h.stopped {
		return
	}
	h.stopped = true
	h.r.stopProc()
	if h.m.parts[h.p] == h {
		delete(h.m.parts, h.p)
	}
	h.m.s.log.add("%s closed", h.r.name)
}

// logger writes the process's log lines into the op log, on the loop, in
// the order the calls are settled; the loop reads the member's pauses and
// counts from them.
func (in *minc) logger() *slog.Logger { return slog.New(&memberLog{in: in}) }

type memberLog struct {
	in    *minc
	attrs []slog.Attr
}

func (h *memberLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *memberLog) Handle(_ context.Context, r slog.Record) error {
	in := h.in
	if in.isDead() {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		if a.Key != "group" && a.Key != "topic" && a.Key != "member" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	line, msg := b.String(), r.Message
	in.m.s.bubble.postLog(in.tag, line, func() {
		if in.isDead() {
			return
		}
		in.m.s.log.add("%s: %s", in.tag, line)
		in.m.g.noted(in, msg)
	})
	return nil
}

func (h *memberLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &memberLog{in: h.in, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *memberLog) WithGroup(string) slog.Handler { return h }
