package core_test

// Reader commands of the scripts (script_test.go). The reader reads from a
// toy ensemble: per node the shards it holds, whether it answers, and its
// clock's skew. A node answers a scan as core.Owner.Close would with no
// seal: it closed [From, min(To, clock-A)) and returns its shards there.
//
//	reader [n= k= w= accept= read-delay=] [start=0s] [window=] [lookahead=]
//	       [in-doubt-wait=] [rescan-every=] [skip-behind=] [max-deferred=]
//	       [deferred-rescan=] [max-deferred-rescan=]
//	                          a new Reader (DefaultReaderConfig, then the
//	                          overrides) and an empty ensemble
//	put id=pP/S offset= nodes=(..) [recs=1]
//	                          store the shards of a stripe of recs records
//	                          on those nodes ("pP-sS-rI" are its values)
//	corrupt offset= node=     store garbage in that node's slot
//	down nodes=(..)           those nodes stop answering (unheard)
//	up nodes=(..)             they answer again
//	skew nodes=(..) by=       their clocks run by ahead (negative: behind)
//	next [now=]               Reader.Next: the scan it asks for, or "wait"
//	apply                     Reader.Apply of that scan, answered by the nodes
//	run to= [from=] [every=10ms]
//	                          from..to in steps: every scan Next asks for,
//	                          answered; prints rescans, and main scans whose
//	                          output holds something (a stall once while it
//	                          repeats)
//
// Output lines, one a record or report: "deliver O:I pP/S [late]",
// "void xN", "duplicate xN", "in-doubt O pP/S seen=N unheard=(..)",
// "corrupt node=N offset=O", "resolved O", "stalled: why", "short" (the
// nodes closed less than the scan asked).

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

type scriptReader struct {
	r     *core.Reader
	p     quorum.Params
	world []map[uint64][]byte // node -> offset -> stored shard bytes
	down  []bool
	skew  []int64
	last  *core.Scan // the scan next returned, for apply
}

func (x *driver) readerCmd(emit func(string, ...any)) bool {
	d := x.d
	if d.Cmd == "reader" {
		p := x.params()
		cfg := core.DefaultReaderConfig(p)
		cfg.Window = uint64(x.dur("window", int64(cfg.Window)))
		cfg.LookAhead = uint64(x.dur("lookahead", int64(cfg.LookAhead)))
		cfg.InDoubtWait = x.dur("in-doubt-wait", cfg.InDoubtWait)
		cfg.RescanEvery = x.dur("rescan-every", cfg.RescanEvery)
		cfg.SkipBehind = uint64(x.dur("skip-behind", int64(cfg.SkipBehind)))
		cfg.MaxDeferred = x.num("max-deferred", cfg.MaxDeferred)
		cfg.DeferredRescan = x.dur("deferred-rescan", cfg.DeferredRescan)
		cfg.MaxDeferredRescan = x.dur("max-deferred-rescan", cfg.MaxDeferredRescan)
		sr := &scriptReader{r: core.NewReader(cfg, core.Position{Offset: uint64(x.at("start", 0))}), p: p,
			world: make([]map[uint64][]byte, p.N), down: make([]bool, p.N), skew: make([]int64, p.N)}
		for i := range sr.world {
			sr.world[i] = map[uint64][]byte{}
		}
		x.rd = sr
		emit("reader at %s: n=%d k=%d w=%d A=%v D=%v window=%s lookahead=%s in-doubt-wait=%s rescan-every=%s skip-behind=%s max-deferred=%d deferred-rescan=%s",
			offs(uint64(x.at("start", 0))), p.N, p.K, p.W, p.AcceptWindow, p.ReadDelay, dura(int64(cfg.Window)), dura(int64(cfg.LookAhead)),
			dura(cfg.InDoubtWait), dura(cfg.RescanEvery), dura(int64(cfg.SkipBehind)), cfg.MaxDeferred, dura(cfg.DeferredRescan))
		return true
	}
	switch d.Cmd {
	case "put", "corrupt", "down", "up", "skew", "next", "apply", "run":
	default:
		return false
	}
	sr := x.rd
	if sr == nil {
		d.Fatalf(x.t, "no reader (run reader first)")
	}
	switch d.Cmd {
	case "put":
		id, off := x.id("id"), x.off("offset")
		recs := make([]stripe.Record, x.num("recs", 1))
		for i := range recs {
			recs[i].Value = fmt.Appendf(nil, "%s-r%d", strings.Replace(name(id), "/", "-s", 1), i)
		}
		payload, err := stripe.AppendBatch(nil, recs)
		if err != nil {
			d.Fatalf(x.t, "%v", err)
		}
		shards, err := stripe.Encode(id, off, sr.p.N, sr.p.K, payload)
		if err != nil {
			d.Fatalf(x.t, "%v", err)
		}
		x.need("nodes")
		for _, n := range x.nums("nodes") {
			sr.world[n][off] = shards[n].Marshal()
		}
		emit("%s at %s on nodes %s", name(id), offs(off), list(x.nums("nodes")))
	case "corrupt":
		off, n := x.off("offset"), x.num("node", 0)
		sr.world[n][off] = []byte("not a shard")
		emit("node %d holds garbage at %s", n, offs(off))
	case "down", "up":
		for _, n := range x.nums("nodes") {
			sr.down[n] = d.Cmd == "down"
		}
		emit("down: %s", list(sr.downNodes()))
	case "skew":
		x.need("nodes")
		for _, n := range x.nums("nodes") {
			sr.skew[n] = x.dur("by", 0)
		}
		emit("clock skews: %s", strings.Join(sr.skews(), " "))
	case "next":
		sc, ok := sr.r.Next(x.now)
		if !ok {
			sr.last = nil
			emit("wait")
			break
		}
		sr.last = &sc
		emit("%s", sr.scanLine(sc))
	case "apply":
		if sr.last == nil {
			d.Fatalf(x.t, "no scan to apply (next said wait, or was not run)")
		}
		sc := *sr.last
		sr.last = nil
		for _, line := range sr.outputLines(sr.r.Apply(x.now, sc, sr.answer(x.now, sc))) {
			emit("%s", line)
		}
	case "run":
		x.run(emit)
	}
	return true
}

// run drives the reader from..to: at each step every scan Next asks for,
// answered, until Next says wait or a scan stalls (as the actor waits a poll).
func (x *driver) run(emit func(string, ...any)) {
	sr := x.rd
	x.need("to")
	from, to, every := x.at("from", x.now-int64(T0)), x.at("to", 0), x.dur("every", 10_000_000)
	stalls, lastStall := 0, "" // a stall repeating with nothing else between is printed once
	for x.now = from; x.now <= to; x.now += every {
		for range 1000 {
			sc, ok := sr.r.Next(x.now)
			if !ok {
				break
			}
			out := sr.r.Apply(x.now, sc, sr.answer(x.now, sc))
			lines := slices.DeleteFunc(sr.outputLines(out), func(l string) bool { return l == "short" })
			if out.Stalled != "" && len(lines) == 1 && stalls > 0 {
				stalls, lastStall = stalls+1, offs(x.now)
				break
			}
			if stalls > 1 {
				emit("  (stalled at every step up to @%s)", lastStall)
			}
			stalls = 0
			if out.Stalled != "" {
				stalls = 1
			}
			if sc.Rescan || len(lines) > 0 {
				emit("@%s %s", offs(x.now), sr.scanLine(sc))
				for _, l := range lines {
					emit("  %s", l)
				}
			}
			if out.Stalled != "" {
				break
			}
		}
	}
	if stalls > 1 {
		emit("  (stalled at every step up to @%s)", lastStall)
	}
	x.now -= every
}

// answer is every asked node's answer to sc at time now.
func (sr *scriptReader) answer(now int64, sc core.Scan) []core.NodeResult {
	var out []core.NodeResult
	for _, n := range sc.Nodes {
		if sr.down[n] {
			out = append(out, core.NodeResult{Node: n})
			continue
		}
		clock := now + sr.skew[n]
		closed := max(min(uint64(max(clock-int64(sr.p.AcceptWindow), 0)), sc.To), sc.From)
		res := core.NodeResult{Node: n, Heard: true, Closed: closed, Clock: clock}
		for _, off := range slices.Sorted(maps.Keys(sr.world[n])) {
			switch {
			case off >= sc.From && off < closed:
				res.Entries = append(res.Entries, core.Entry{Offset: off, Shard: sr.world[n][off]})
			case sc.Probe && off >= sc.To && res.After == 0:
				res.After = off
			}
		}
		out = append(out, res)
	}
	return out
}

func (sr *scriptReader) skews() []string {
	var out []string
	for i, sk := range sr.skew {
		if sk != 0 {
			out = append(out, fmt.Sprintf("%d:%s", i, dura(sk)))
		}
	}
	if out == nil {
		out = []string{"none"}
	}
	return out
}

func (sr *scriptReader) downNodes() []int {
	var out []int
	for i, dn := range sr.down {
		if dn {
			out = append(out, i)
		}
	}
	return out
}

func (sr *scriptReader) scanLine(sc core.Scan) string {
	kind := "scan"
	if sc.Rescan {
		kind = "rescan"
	}
	s := fmt.Sprintf("%s [%s,%s)", kind, offs(sc.From), offs(sc.To))
	if len(sc.Nodes) != sr.p.N {
		s += " nodes=" + list(sc.Nodes)
	}
	if sc.Probe {
		s += " probe-limit=" + offs(sc.ProbeLimit)
	}
	return s
}

// outputLines prints an Output, one record or report a line.
func (sr *scriptReader) outputLines(o core.Output) []string {
	var out []string
	for _, dl := range o.Deliveries {
		l := fmt.Sprintf("deliver %s %s %s", pos(dl.Pos), name(dl.Stripe), dl.Record.Value)
		if dl.Late {
			l += " late"
		}
		out = append(out, l)
	}
	if o.Voids > 0 {
		out = append(out, fmt.Sprintf("void x%d", o.Voids))
	}
	if o.Duplicates > 0 {
		out = append(out, fmt.Sprintf("duplicate x%d", o.Duplicates))
	}
	for _, r := range o.InDoubt {
		out = append(out, fmt.Sprintf("in-doubt %s %s seen=%d unheard=%s", offs(r.Offset), name(r.Stripe), r.Seen, list(r.Unheard)))
	}
	for _, c := range o.Corrupt {
		out = append(out, humanize(fmt.Sprintf("corrupt node=%d offset=%s", c.Node, offs(c.Offset))))
	}
	for _, off := range o.Resolved {
		out = append(out, "resolved "+offs(off))
	}
	if o.Stalled != "" {
		out = append(out, humanize("stalled: "+o.Stalled))
	}
	if o.Short {
		out = append(out, "short")
	}
	return out
}
