package sim

import (
	"sync"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// reader is one partition reader as the checks see it: the shipped
// reader (actors.Client.NewReader, the reader actor around core.Reader)
// run in the bubble by a reader process (rproc) of its own, over the
// simulated bus (bus_sim.go), on the reader's skewed clock
// (ClientConfig.Now) and its own view of the topic (a catalog that an
// alter updates when the reader learns it, alter.go). What it delivers
// reaches the checks through its Sink, its in-doubt, void and stall
// reports through OnReport, its LowWater, frontier and deferred offsets
// through the handle (readerView). It is done once every producer is done
// and its frontier is past the end of every write. A restart (the fan-out
// reader's failover) closes the process and starts a new one, resumed
// where deferred.go says.
type reader struct {
	s     *sim
	id    int
	name  string // "r0", or a group member's partition reader: "m0a3f.p0#2" (member, partition, holding)
	skew  int64
	start core.Position
	r     *readerView // the running shipped reader, as the loop sees it
	inc   int         // incarnation: bumped by every restart
	proc  *rproc      // the running process; nil while restarting or done
	done  bool
	ppm   int64 // clock rate offset (group members' readers run on the member's clock)
	// open: the offsets the reader reported in doubt and has not resolved
	// yet, by its reports (InDoubt, Resolved): the checks' own account of
	// what LowWater must not pass.
	open map[uint64]bool
	// member is the group member's holding this reader reads for
	// (group_ports.go); nil for the fan-out readers.
	member *holding

	got       []delivered     // everything delivered, over all incarnations
	resumes   []core.Position // where each incarnation started
	started   []int64         // when each incarnation started (true time)
	caught    int64           // when the first incarnation first caught up with its clock (progress.go); 0: not yet
	view      []delivered     // what a subscriber keeps (filled by the checks)
	inDoubt   []core.InDoubtReport
	inDoubtAt []int64 // when each in-doubt report came (true time)
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
	// Start before the run: producers' skewed clocks write below epoch0.
	from := core.Position{Offset: s.readerStart()}
	return &reader{s: s, id: id, name: sprintf("r%d", id), skew: skew, start: from, r: newReaderView(s, from),
		resumes: []core.Position{from}, started: []int64{s.now + int64(s.cfg.ReaderLate)}, open: map[uint64]bool{}}
}

// readerView is what the loop reads of a reader: the shipped reader's
// handle (LowWater, Handed, Deferred) and what its deliveries showed.
// The loop reads it only between settles, while the drivers are blocked.
type readerView struct {
	rd   *actors.Reader
	from core.Position
	cat  *simCatalog
}

func newReaderView(s *sim, from core.Position) *readerView {
	return &readerView{from: from, cat: newSimCatalog(s)}
}

// Pos is where the reader stands (actors.Reader.Pos).
func (v *readerView) Pos() core.Position {
	if v.rd == nil {
		return v.from
	}
	return v.rd.Pos()
}

// Frontier is the offset below which the reader handed everything it
// could read (actors.Reader.Handed).
func (v *readerView) Frontier() uint64 {
	if v.rd == nil {
		return v.from.Offset
	}
	return max(v.rd.Handed(), v.from.Offset)
}

func (v *readerView) Deferred() int {
	if v.rd == nil {
		return 0
	}
	return v.rd.Deferred()
}

func (v *readerView) LowWater() core.Position {
	if v.rd == nil {
		return v.from
	}
	return v.rd.LowWater()
}

// SetTiming is the reader learning an alter: its catalog's record
// changes, and the reader actor takes it up on its next pump.
func (v *readerView) SetTiming(readDelay, accept int64) { v.cat.set(readDelay, accept) }

func (v *readerView) ReadDelay() int64 { return int64(v.cat.topic().Params.ReadDelay) }

// simCatalog is a reader process's view of the simulated topic. It does
// not validate: during an alter a reader may hold a read delay below the
// largest window for a while, as the simulation's copy did.
type simCatalog struct {
	mu sync.Mutex
	t  *meta.Topic
}

func newSimCatalog(s *sim) *simCatalog {
	ens := make([]string, s.cfg.Nodes)
	for i := range ens {
		ens[i] = nodeName(i)
	}
	return &simCatalog{t: &meta.Topic{Name: simTopic, Partitions: 1, Params: s.params, Ensembles: [][]string{ens}, Created: s.topicCreated()}}
}

func (c *simCatalog) Topic(name string) (*meta.Topic, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if name != simTopic {
		return nil, meta.ErrNotFound
	}
	return c.t, nil
}

func (c *simCatalog) topic() *meta.Topic {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *simCatalog) set(readDelay, accept int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := *c.t
	t.Params.ReadDelay, t.Params.AcceptWindow, t.Accept = time.Duration(readDelay), time.Duration(accept), meta.Topic{}.Accept
	c.t = &t
}

// copyOf is a fresh catalog with c's record (a restarted reader knows
// what its predecessor learned).
func (c *simCatalog) copyOf() *simCatalog { return &simCatalog{t: c.topic()} }

// rproc is one reader process: a client process (cproc) running one
// shipped reader.
type rproc struct {
	*cproc
	rd *actors.Reader
}

// startProc starts r's reader process from from (on the loop): sink gets
// each batch of deliveries on the reader's sink goroutine, report each
// scan's output on the actor's. Both hand what the loop must see over
// with p.post.
func (r *reader) startProc(from core.Position, sink func(p *rproc, ds []core.Delivery)) *rproc {
	s := r.s
	name := r.name
	if r.inc > 0 {
		name = sprintf("%s/%d", r.name, r.inc)
	}
	skew, ppm := r.skew, r.ppm
	b := s.bubble
	cp, err := s.newClientProc(name, r.r.cat, func() int64 { t := b.trueNow(); return t + skew + (t-epoch0)*ppm/1_000_000 })
	if err != nil {
		s.violate("%s: client: %v", name, err)
		return nil
	}
	p := &rproc{cproc: cp}
	rd, err := p.client.NewReader(actors.ReaderConfig{Topic: simTopic, From: from, Core: s.readerConfig(),
		ScanTimeout: time.Duration(scanTimeout), SuspectTimeout: time.Duration(suspectTimeout),
		Bugs: actors.ReaderBugs{UnheardAsEmpty: s.cfg.inject.unheardAsEmpty},
		Sink: func(ds []core.Delivery) { sink(p, ds) },
		OnReport: func(out core.Output) {
			p.post(func() {
				if r.proc == p {
					r.report(out)
				}
			})
		}})
	if err != nil {
		s.violate("%s: reader: %v", name, err)
		s.bubble.wg.Go(p.close)
		return nil
	}
	p.rd = rd
	r.proc = p
	r.r.rd = rd
	r.r.from = from
	return p
}

// stopProc ends r's process from the loop, without waiting for it.
func (r *reader) stopProc() {
	if p := r.proc; p != nil {
		r.proc = nil
		r.s.bubble.wg.Go(p.close)
	}
}

// startFanout starts a fan-out reader's process (on the loop).
func (r *reader) startFanout(from core.Position) {
	r.startProc(from, func(p *rproc, ds []core.Delivery) {
		p.post(func() {
			if r.proc == p {
				r.took(ds)
			}
		})
	})
}

// restart closes the reader process, with its dedupe memory, its deferred
// in-doubt offsets and the scan in flight, and starts a fresh one where a
// consumer would have committed (resumeFrom), after a pause (another node
// taking over the lease).
func (r *reader) restart() {
	if r.done || r.proc == nil {
		return
	}
	from := r.resumeFrom()
	deferred, low := r.r.Deferred(), r.r.LowWater()
	r.stopProc()
	r.inc++
	r.resumes = append(r.resumes, from)
	r.started = append(r.started, r.s.now)
	r.r = &readerView{from: from, cat: r.r.cat.copyOf()}
	r.open = map[uint64]bool{}
	r.s.log.add("r%d RESTART #%d from %s (low water %s, %d in-doubt offsets deferred)", r.id, r.inc, r.s.log.pos(from),
		r.s.log.pos(low), deferred)
	inc := r.inc
	r.s.at(r.s.now+r.s.rnd.Int64N(300*int64(time.Millisecond)), func() {
		if r.inc == inc && !r.done {
			r.startFanout(from)
		}
	})
}

func (r *reader) clock() int64 { return r.s.now + r.skew + (r.s.now-epoch0)*r.ppm/1_000_000 }

// wakeAt starts a fan-out reader at t.
func (r *reader) wakeAt(t int64) {
	r.s.at(t, func() {
		if r.proc == nil && !r.done {
			r.startFanout(r.start)
		}
	})
	r.s.at(t, r.watch)
}

// watch is an event every watchEvery while the reader is not done: the
// shipped reader runs on timers of its own, and the loop's queue must not
// run dry while it does (the loop sleeps to its next event).
func (r *reader) watch() {
	if !r.done {
		r.s.at(r.s.now+watchEvery, r.watch)
	}
}

// watchEvery is the period of a reader's watch event.
const watchEvery = 100 * int64(time.Millisecond)

// report keeps one scan's output for the checks (on the loop), and ends
// a fan-out reader once it is done.
func (r *reader) report(out core.Output) {
	s := r.s
	for _, off := range out.Resolved {
		delete(r.open, off)
	}
	for _, d := range out.InDoubt {
		r.open[d.Offset] = true
		s.log.add("%s IN-DOUBT %s %s seen=%d unheard=%s", r.name, sid(d.Stripe), s.log.off(d.Offset), d.Seen, nodeList(d.Unheard))
	}
	r.noteCaughtUp()
	s.log.add("%s apply delivered=%d voids=%d in-doubt=%d dups=%d corrupt=%d frontier=%s", r.name, len(out.Deliveries), out.Voids,
		len(out.InDoubt), out.Duplicates, len(out.Corrupt), s.log.off(r.r.Frontier()))
	if out.Stalled != "" {
		s.res.Stalls++
		s.log.add("%s stalled: %s", r.name, out.Stalled)
	}
	if out.Short {
		s.res.Shorts++
	}
	for _, c := range out.Corrupt {
		s.log.add("%s corrupt n%d %s: %v", r.name, c.Node, s.log.off(c.Offset), c.Err)
	}
	if r.member != nil {
		return
	}
	for _, d := range out.InDoubt {
		r.inDoubt = append(r.inDoubt, d)
		r.inDoubtAt = append(r.inDoubtAt, s.now)
	}
	s.res.Voids += out.Voids
	s.res.InDoubt += len(out.InDoubt)
	s.res.Duplicates += out.Duplicates
	s.res.Corrupt += len(out.Corrupt)
	if len(out.Deliveries) == 0 {
		r.checkDone() // else once the sink took them (took)
	}
}

// took records the deliveries the sink took (on the loop).
func (r *reader) took(ds []core.Delivery) {
	s := r.s
	for _, d := range ds {
		r.got = append(r.got, delivered{value: string(d.Record.Value), id: d.Stripe, pos: d.Pos, at: s.now, inc: r.inc, late: d.Late})
		if d.Late {
			s.res.Late++
			s.log.add("%s LATE %s %s (a deferred in-doubt offset resolved)", r.name, sid(d.Stripe), s.log.pos(d.Pos))
		}
	}
	r.checkDone()
}

// checkDone ends a fan-out reader once every producer is done, its
// frontier is past the end and it defers nothing it could still settle.
func (r *reader) checkDone() {
	s := r.s
	if r.done || r.member != nil || s.prodsLeft > 0 || r.r.Pos().Offset <= s.end || r.r.Deferred() != s.wipeStuck(r) {
		return
	}
	r.done = true
	s.readersLeft--
	s.log.add("r%d done at %s", r.id, s.log.pos(r.r.Pos()))
	r.stopProc()
}

// stopReaders closes every reader process still running (a run that
// ended stuck), so the bubble ends with no goroutine left.
func (s *sim) stopReaders() {
	if s.bubble == nil {
		return
	}
	for _, r := range s.readers {
		r.stopProc()
	}
}
