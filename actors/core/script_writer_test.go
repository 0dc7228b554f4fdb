package core_test

// Writer commands of the scripts (script_test.go):
//
//	writer [name=a] [n= k= w= grid= accept= future=] [attempt-timeout=]
//	       [max-attempts=] [retry-span=] [delivery-timeout=] [max-backoff=]
//	       [jitter=] [committed-wait=] [seed=] [draw=]
//	                          a new writer (DefaultWriterConfig of the params,
//	                          then the overrides); draw=N makes every random
//	                          draw N (mod the bound), else a PCG seeded by seed
//	start id=pP/S [now=] [on=a]
//	                          Writer.Start: the first Send
//	reply id= [attempt=0] nodes=(..) status=ok [skew=] [now=] [on=]
//	                          Writer.Reply from each node in turn; with skew=
//	                          the reply carries the node clock now+skew
//	tick [now=] [on=]         Writer.Tick
//
// Effects print one a line, in WriterOutput's order:
//
//	ack pP/S offset=O | fail pP/S: error | send pP/S attempt=N offset=O | done pP/S

import (
	"math/rand/v2"
	"time"

	"github.com/raidq/raidq/actors/core"
)

type scriptWriter struct {
	w   *core.Writer
	rnd core.Rand
}

// fixedRand draws v (mod the bound) every time: scripts that need a known
// conflict jitter.
type fixedRand struct{ v int64 }

func (r fixedRand) Int64N(n int64) int64 { return r.v % n }

func (x *driver) writerCmd(emit func(string, ...any)) bool {
	d := x.d
	if d.Cmd == "writer" {
		p := x.params()
		cfg := core.DefaultWriterConfig(p)
		cfg.AttemptTimeout = x.dur("attempt-timeout", cfg.AttemptTimeout)
		cfg.MaxAttempts = x.num("max-attempts", cfg.MaxAttempts)
		cfg.RetrySpan = x.dur("retry-span", cfg.RetrySpan)
		cfg.DeliveryTimeout = x.dur("delivery-timeout", cfg.DeliveryTimeout)
		cfg.MaxBackoff = x.dur("max-backoff", cfg.MaxBackoff)
		cfg.ConflictJitter = x.dur("jitter", cfg.ConflictJitter)
		cfg.CommittedWait = x.dur("committed-wait", cfg.CommittedWait)
		sw := &scriptWriter{w: core.NewWriter(cfg), rnd: rand.New(rand.NewPCG(uint64(x.num("seed", 1)), 7))}
		if d.HasArg("draw") {
			sw.rnd = fixedRand{int64(x.num("draw", 0))}
		}
		if x.writers == nil {
			x.writers = map[string]*scriptWriter{}
		}
		x.cur = d.Val("name", "a")
		x.writers[x.cur] = sw
		emit("writer %s: n=%d k=%d w=%d grid=%d attempt-timeout=%v max-attempts=%d retry-span=%v delivery-timeout=%v jitter=%v committed-wait=%v",
			x.cur, p.N, p.K, p.W, p.Grid, dura(cfg.AttemptTimeout), cfg.MaxAttempts, dura(cfg.RetrySpan), dura(cfg.DeliveryTimeout),
			dura(cfg.ConflictJitter), dura(cfg.CommittedWait))
		return true
	}
	if d.Cmd != "start" && d.Cmd != "reply" && d.Cmd != "tick" {
		return false
	}
	sw := x.writers[d.Val("on", x.cur)]
	if sw == nil {
		d.Fatalf(x.t, "no writer %q (run writer first)", d.Val("on", x.cur))
	}
	switch d.Cmd {
	case "start":
		s := sw.w.Start(x.now, x.id("id"))
		emit("send %s attempt=%d offset=%s", name(s.ID), s.Attempt, offs(s.Offset))
	case "reply":
		id, att, st := x.id("id"), x.num("attempt", 0), x.status("status")
		x.need("nodes")
		for _, node := range x.nums("nodes") {
			var clock int64
			if d.HasArg("skew") {
				clock = x.now + x.dur("skew", 0)
			}
			writerEffects(emit, sw.w.Reply(x.now, sw.rnd, id, att, node, st, clock))
		}
	case "tick":
		writerEffects(emit, sw.w.Tick(x.now, sw.rnd))
	}
	return true
}

func writerEffects(emit func(string, ...any), o core.WriterOutput) {
	for _, a := range o.Acks {
		emit("ack %s offset=%s", name(a.ID), offs(a.Offset))
	}
	for _, f := range o.Fails {
		emit("fail %s: %v", name(f.ID), f.Err)
	}
	for _, s := range o.Sends {
		emit("send %s attempt=%d offset=%s", name(s.ID), s.Attempt, offs(s.Offset))
	}
	for _, dn := range o.Done {
		emit("done %s", name(dn.ID))
	}
}

// dura prints a duration setting (0 as "0s").
func dura(v int64) string { return time.Duration(v).String() }
