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
	name  string // "r0", or a group member's partition reader: "m0a3f.p0#2" (member, partition, holding)
	skew  int64
	start core.Position
	r     *core.Reader
	inc   int     // incarnation: bumped by every restart
	cur   *flight // the scan in flight, if any
	wake  int     // token of the one pending wake-up; older ones do nothing
	done  bool
	// suspect: by ensemble position, the node's last scan timed out, so
	// the next one waits only suspectTimeout for it (the reader actor's
	// SuspectTimeout, actors/reader.go), until it answers again.
	suspect []bool
	ppm     int64 // clock rate offset (group members' readers run on the member's clock)
	// open: the offsets the core reported in doubt and has not resolved
	// yet, by its outputs (InDoubt, Resolved): the checks' own account of
	// what LowWater must not pass.
	open map[uint64]bool
	// member is the group member's holding this reader reads for
	// (group.go); nil for the fan-out readers.
	member *holding

	got       []delivered     // everything delivered, over all incarnations
	resumes   []core.Position // where each incarnation started
	started   []int64         // when each incarnation started (true time)
	caught    int64           // when the first incarnation first caught up with its clock (progress.go); 0: not yet
	view      []delivered     // what a subscriber keeps (filled by the checks)
	inDoubt   []core.InDoubtReport
	inDoubtAt []int64 // when each in-doubt report came (true time)
}

// flight is one scan on its way to the nodes. Each node has its own
// deadline (scanTimeout, or suspectTimeout for a suspect node); the scan
// is applied once every node answered or passed its deadline.
type flight struct {
	sc      core.Scan
	results []core.NodeResult
	settled map[int]bool // node answered or timed out
}

// delivered is one record as a reader delivered it.
type delivered struct {
	value string
	id    stripe.ID
	pos   core.Position
	at    int64 // true time of the delivery
	inc   int   // reader incarnation that delivered it
	late  bool  // from a deferred in-doubt offset, below records already delivered
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
	return &reader{s: s, id: id, name: sprintf("r%d", id), skew: skew, start: from, r: core.NewReader(cfg, from),
		resumes: []core.Position{from}, started: []int64{s.now + int64(s.cfg.ReaderLate)}, suspect: make([]bool, s.cfg.Nodes),
		open: map[uint64]bool{}}
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
	r.started = append(r.started, r.s.now)
	r.cur = nil
	r.r = core.NewReader(r.s.readerConfig(), from)
	r.suspect = make([]bool, r.s.cfg.Nodes) // a new reader actor
	r.open = map[uint64]bool{}
	r.s.log.add("r%d RESTART #%d from %s (low water %s, %d in-doubt offsets deferred)", r.id, r.inc, r.s.log.pos(from),
		r.s.log.pos(low), deferred)
	r.wakeAt(r.s.now + r.s.rnd.Int64N(300*int64(time.Millisecond)))
}

func (r *reader) clock() int64 { return r.s.now + r.skew + (r.s.now-epoch0)*r.ppm/1_000_000 }

// step asks the core for the next scan and sends it, or waits.
func (r *reader) step() {
	s := r.s
	if r.done || r.cur != nil {
		return
	}
	if r.member != nil && !r.member.reading() {
		return
	}
	if r.member == nil && s.prodsLeft == 0 && r.r.Pos().Offset > s.end && r.r.Deferred() == s.wipeStuck(r) {
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
	if r.member != nil && r.atHead(sc) {
		return
	}
	f := &flight{sc: sc, settled: map[int]bool{}}
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
	s.log.add("%s %s [%s,%s) nodes=%s%s", r.name, kind, s.log.off(sc.From), s.log.off(sc.To), nodeList(sc.Nodes), probe)
	for _, i := range sc.Nodes {
		n := s.nodes[i]
		s.send(n.slow, func() string { return sprintf("%s->n%d scan", r.name, i) }, func() { n.scan(r, f) })
		timeout := scanTimeout
		if r.suspect[i] {
			timeout = suspectTimeout
		}
		s.at(s.now+timeout, func() { r.timedOut(f, i) })
	}
}

// answer records one node's reply to f. replied is false for a fail-fast
// node's "no responders", which, as in the reader actor, neither marks
// the node suspect nor clears it.
func (r *reader) answer(f *flight, res core.NodeResult, replied bool) {
	if r.cur != f || f.settled[res.Node] {
		return // after the node's deadline
	}
	f.settled[res.Node] = true
	if replied {
		r.suspect[res.Node] = false
	}
	f.results = append(f.results, res)
	if len(f.settled) == len(f.sc.Nodes) {
		r.finish(f)
	}
}

// timedOut is node i's deadline for f: unheard, and suspect from now on.
func (r *reader) timedOut(f *flight, i int) {
	if r.cur != f || f.settled[i] {
		return
	}
	f.settled[i] = true
	if !r.suspect[i] {
		r.s.res.Suspects++
	}
	r.suspect[i] = true
	if len(f.settled) == len(f.sc.Nodes) {
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
	r.noteCaughtUp()
	r.record(out)
	r.noteProbe(f.sc, out)
	heard := 0
	for _, res := range f.results {
		if res.Heard {
			heard++
		}
	}
	s.log.add("%s apply [%s,%s) heard=%d/%d delivered=%d voids=%d in-doubt=%d dups=%d corrupt=%d pos=%s",
		r.name, s.log.off(f.sc.From), s.log.off(f.sc.To), heard, len(f.sc.Nodes), len(out.Deliveries), out.Voids,
		len(out.InDoubt), out.Duplicates, len(out.Corrupt), s.log.pos(r.r.Pos()))
	if out.Stalled != "" {
		s.res.Stalls++
		s.log.add("%s stalled: %s", r.name, out.Stalled)
		r.wakeAt(s.now + pollEvery)
		return
	}
	if out.Short {
		s.res.Shorts++
		// The nodes closed less than asked (the reader actor's holdMain):
		// wait for their clocks.
		r.wakeAt(s.now + pollEvery)
		return
	}
	r.wakeAt(s.now)
}

// record keeps the reader's output for the checks.
func (r *reader) record(out core.Output) {
	s := r.s
	for _, off := range out.Resolved {
		delete(r.open, off)
	}
	for _, d := range out.InDoubt {
		r.open[d.Offset] = true
		s.reportInDoubt(r.name, d)
	}
	if r.member != nil {
		r.member.took(out)
		return
	}
	for _, d := range out.Deliveries {
		r.got = append(r.got, delivered{value: string(d.Record.Value), id: d.Stripe, pos: d.Pos, at: s.now, inc: r.inc, late: d.Late})
		if d.Late {
			s.res.Late++
			s.log.add("%s LATE %s %s (a deferred in-doubt offset resolved)", r.name, sid(d.Stripe), s.log.pos(d.Pos))
		}
	}
	for _, d := range out.InDoubt {
		r.inDoubt = append(r.inDoubt, d)
		r.inDoubtAt = append(r.inDoubtAt, s.now)
		s.log.add("%s IN-DOUBT %s %s seen=%d unheard=%s", r.name, sid(d.Stripe), s.log.off(d.Offset), d.Seen, nodeList(d.Unheard))
	}
	for _, c := range out.Corrupt {
		s.log.add("%s corrupt n%d %s: %v", r.name, c.Node, s.log.off(c.Offset), c.Err)
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
		res := core.NodeResult{Node: i, Heard: true, Closed: f.sc.To}
		for _, got := range f.results {
			if got.Node == i && got.Heard {
				res = got
			}
		}
		out = append(out, res)
	}
	return out
}

// atHead is the reader actor's Poll rule: at its clock's head, the reader
// waits until the window spans Poll rather than scan a few milliseconds.
func (r *reader) atHead(sc core.Scan) bool {
	head := uint64(max(r.clock()-r.r.ReadDelay(), 0))
	if !sc.Rescan && sc.To >= head && sc.To-sc.From < uint64(memberPoll) {
		r.wakeAt(r.s.now + memberPoll - int64(sc.To-sc.From))
		return true
	}
	return false
}
