package sim

import (
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// reader is one simulated partition reader around a core.Reader: it runs
// the scans Next asks for against the nodes, one at a time, and applies
// the answers that came back before scanTimeout (the others are unheard).
// It stops once every producer is done and its position is past the end
// of every write. A restart (the fan-out reader's failover) replaces the
// core reader by a fresh one resumed after the last delivered record.
type reader struct {
	s     *sim
	id    int
	skew  int64
	start core.Position
	r     *core.Reader
	inc   int     // incarnation: bumped by every restart
	cur   *flight // the scan in flight, if any
	wake  int     // token of the one pending wake-up; older ones do nothing
	done  bool

	got     []delivered     // everything delivered, over all incarnations
	resumes []core.Position // where each incarnation started
	view    []delivered     // what a subscriber keeps (filled by the checks)
	inDoubt []core.InDoubtReport
}

// flight is one scan on its way to the nodes.
type flight struct {
	sc      core.Scan
	results []core.NodeResult
}

// delivered is one record as a reader delivered it.
type delivered struct {
	value string
	id    stripe.ID
	pos   core.Position
	inc   int  // reader incarnation that delivered it
	late  bool // from a deferred in-doubt offset, below records already delivered
}

// readerConfig is every simulated reader's core config (with the core
// bugs a test re-injects).
func (s *sim) readerConfig() core.ReaderConfig {
	cfg := core.DefaultReaderConfig(s.params)
	cfg.Bugs = s.cfg.inject.reader
	return cfg
}

func newReader(s *sim, id int, skew int64) *reader {
	cfg := s.readerConfig()
	// Start before the run: producers' skewed clocks write below epoch0.
	from := core.Position{Offset: s.readerStart()}
	return &reader{s: s, id: id, skew: skew, start: from, r: core.NewReader(cfg, from), resumes: []core.Position{from}}
}

// wakeAt schedules the next step at t, replacing any pending one.
func (r *reader) wakeAt(t int64) {
	r.wake++
	token := r.wake
	r.s.at(t, func() {
		if token == r.wake {
			r.step()
		}
	})
}

// restart drops the core reader, its dedupe memory, its deferred in-doubt
// offsets and the scan in flight, and resumes a fresh one where a consumer
// would have committed (resumeFrom), after a pause (another node taking
// over the lease).
func (r *reader) restart() {
	if r.done {
		return
	}
	from := r.resumeFrom()
	deferred, low := r.r.Deferred(), r.r.LowWater()
	r.inc++
	r.resumes = append(r.resumes, from)
	r.cur = nil
	r.r = core.NewReader(r.s.readerConfig(), from)
	r.s.log.add("r%d RESTART #%d from %s (low water %s, %d in-doubt offsets deferred)", r.id, r.inc, r.s.log.pos(from),
		r.s.log.pos(low), deferred)
	r.wakeAt(r.s.now + r.s.rnd.Int64N(300*int64(time.Millisecond)))
}

func (r *reader) clock() int64 { return r.s.now + r.skew }

// step asks the core for the next scan and sends it, or waits.
func (r *reader) step() {
	s := r.s
	if r.done || r.cur != nil {
		return
	}
	if s.prodsLeft == 0 && r.r.Pos().Offset > s.end && r.r.Deferred() == 0 {
		r.done = true
		s.readersLeft--
		s.log.add("r%d done at %s", r.id, s.log.pos(r.r.Pos()))
		return
	}
	sc, ok := r.r.Next(r.clock())
	if !ok {
		r.wakeAt(s.now + pollEvery)
		return
	}
	f := &flight{sc: sc}
	r.cur = f
	kind := "scan"
	if sc.Rescan {
		kind = "rescan"
		s.res.Rescans++
	}
	probe := ""
	if sc.Probe {
		probe = " probe<=" + s.log.off(sc.ProbeLimit)
	}
	s.log.add("r%d %s [%s,%s) nodes=%s%s", r.id, kind, s.log.off(sc.From), s.log.off(sc.To), nodeList(sc.Nodes), probe)
	for _, i := range sc.Nodes {
		n := s.nodes[i]
		s.send(n.slow, func() string { return sprintf("r%d->n%d scan", r.id, i) }, func() { n.scan(r, f) })
	}
	s.at(s.now+scanTimeout, func() { r.finish(f) })
}

// answer records one node's reply to f.
func (r *reader) answer(f *flight, res core.NodeResult) {
	if r.cur != f {
		return // after the timeout
	}
	f.results = append(f.results, res)
	if len(f.results) == len(f.sc.Nodes) {
		r.finish(f)
	}
}

// finish applies f with whatever answers came back.
func (r *reader) finish(f *flight) {
	s := r.s
	if r.cur != f {
		return
	}
	r.cur = nil
	if s.cfg.inject.unheardAsEmpty {
		f.results = r.silentAsEmpty(f)
	}
	out := r.r.Apply(r.clock(), f.sc, f.results)
	r.record(out)
	r.noteProbe(f.sc, out)
	heard := 0
	for _, res := range f.results {
		if res.Heard {
			heard++
		}
	}
	s.log.add("r%d apply [%s,%s) heard=%d/%d delivered=%d voids=%d in-doubt=%d dups=%d corrupt=%d pos=%s",
		r.id, s.log.off(f.sc.From), s.log.off(f.sc.To), heard, len(f.sc.Nodes), len(out.Deliveries), out.Voids,
		len(out.InDoubt), out.Duplicates, len(out.Corrupt), s.log.pos(r.r.Pos()))
	if out.Stalled != "" {
		s.res.Stalls++
		s.log.add("r%d stalled: %s", r.id, out.Stalled)
		r.wakeAt(s.now + pollEvery)
		return
	}
	r.wakeAt(s.now)
}

// record keeps the reader's output for the checks.
func (r *reader) record(out core.Output) {
	s := r.s
	for _, d := range out.Deliveries {
		r.got = append(r.got, delivered{value: string(d.Record.Value), id: d.Stripe, pos: d.Pos, inc: r.inc, late: d.Late})
		if d.Late {
			s.res.Late++
			s.log.add("r%d LATE %s %s (a deferred in-doubt offset resolved)", r.id, sid(d.Stripe), s.log.pos(d.Pos))
		}
	}
	for _, d := range out.InDoubt {
		r.inDoubt = append(r.inDoubt, d)
		s.log.add("r%d IN-DOUBT %s %s seen=%d unheard=%s", r.id, sid(d.Stripe), s.log.off(d.Offset), d.Seen, nodeList(d.Unheard))
	}
	for _, c := range out.Corrupt {
		s.log.add("r%d corrupt n%d %s: %v", r.id, c.Node, s.log.off(c.Offset), c.Err)
	}
	s.res.Voids += out.Voids
	s.res.InDoubt += len(out.InDoubt)
	s.res.Duplicates += out.Duplicates
	s.res.Corrupt += len(out.Corrupt)
}

// silentAsEmpty is the unheardAsEmpty bug: nodes that did not answer are
// taken for nodes that answered with nothing.
func (r *reader) silentAsEmpty(f *flight) []core.NodeResult {
	out := []core.NodeResult{}
	for _, i := range f.sc.Nodes {
		res := core.NodeResult{Node: i, Heard: true}
		for _, got := range f.results {
			if got.Node == i && got.Heard {
				res = got
			}
		}
		out = append(out, res)
	}
	return out
}
