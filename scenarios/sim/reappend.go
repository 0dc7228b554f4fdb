package sim

import (
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/stripe"
)

// In-doubt re-append (docs/design.md#read-path). A reader's
// core.InDoubtReport is published by the reader actor as a
// bus.InDoubtReport (over the simulated bus: a lossy message to every
// node); the shipped repair loop of a node that is up
// queues it as a target (actors/node/reappend.go: onInDoubt, then
// repairTarget and resolveInDoubt on its passes, the hand-over to the
// lowest live position through Publish, recentlyReappended). What is
// still a copy here is the writing (actors.Client.Reappend, the
// producer's writer driver, which the simulation does not ship yet):
// a core.Writer on the node's clock writes the decoded stripe again as
// a producer would, the same stripe id at a fresh offset, all n shards,
// acked at W. Readers dedupe by stripe id: the copy is a "moved" or
// "redelivered" stripe for the checks, and its offsets join the truth's
// offsets.

// publishInDoubt delivers a reader's in-doubt report (a bus.InDoubtReport
// the reader actor published) to every node, a lossy message each.
func (s *sim) publishInDoubt(from, subject string, data []byte) {
	if s.repair == nil {
		return
	}
	r, err := bus.DecodeInDoubt(data)
	if err != nil {
		s.violate("%s published a bad in-doubt report: %v", from, err)
		return
	}
	id := stripe.ID{Producer: r.Producer, Seq: r.Seq}
	for _, n := range s.nodes {
		s.send(n.slow, func() string { return sprintf("%s->n%d in-doubt %s", from, n.id, sid(id)) },
			func() { s.deliverInDoubt(n, subject, data) })
	}
}

// inDoubtSubject is the subject of the simulated partition's reports.
func (s *sim) inDoubtSubject() string {
	subj, err := bus.NewSubjects("sim")
	if err != nil {
		panic(sprintf("sim: subjects: %v", err))
	}
	return subj.InDoubt(simTopic, 0)
}

// reappender writes one in-doubt stripe again through a core.Writer on
// its node's clock (actors.Client.Reappend).
type reappender struct {
	r       *repairer
	p       *repairProc
	w       *core.Writer
	id      stripe.ID
	payload []byte
	acked   uint64
	over    bool
	done    func(uint64)
}

func (a *reappender) name() string { return sprintf("n%d.reappend", a.r.n.id) }

// reappend writes payload as stripe id at a fresh offset on every node
// and answers the acked offset, 0 if it failed (on the loop, while p
// lives).
func (r *repairer) reappend(p *repairProc, id stripe.ID, payload []byte, done func(uint64)) {
	a := &reappender{r: r, p: p, w: core.NewWriter(core.DefaultWriterConfig(r.s.params)), id: id, payload: payload, done: done}
	r.s.log.add("n%d repair: re-append in-doubt %s", r.n.id, sid(id))
	a.send(a.w.Start(r.n.clock(), id))
	a.tick()
}

func (a *reappender) live() bool { return !a.over && a.p.live() }

func (a *reappender) tick() {
	if !a.live() {
		return
	}
	a.handle(a.w.Tick(a.r.n.clock(), a.r.s.rnd))
	a.r.n.after(a.r.s.now+tickEvery, a.tick)
}

// send carries out a Send: shard i to node i.
func (a *reappender) send(snd core.Send) {
	s := a.r.s
	s.truth.offsets[a.id] = append(s.truth.offsets[a.id], snd.Offset)
	shards, err := stripe.Encode(a.id, snd.Offset, s.cfg.Nodes, s.cfg.K, a.payload)
	if err != nil {
		s.violate("%s: encode: %v", a.name(), err)
		return
	}
	s.log.add("%s send %s#%d %s", a.name(), sid(a.id), snd.Attempt, s.log.off(snd.Offset))
	for i, n := range s.nodes {
		b := shards[i].Marshal()
		s.send(n.slow || a.r.n.slow, func() string { return sprintf("%s->n%d write %s#%d", a.name(), i, sid(a.id), snd.Attempt) },
			func() { n.write(a, snd, b) })
	}
}

func (a *reappender) reply(snd core.Send, node int, st core.Status, clock int64) {
	if !a.live() {
		return
	}
	a.handle(a.w.Reply(a.r.n.clock(), a.r.s.rnd, snd.ID, snd.Attempt, node, st, clock))
}

// handle carries out the writer's output for the one stripe, in
// WriterOutput's order: its Done comes last, after its Ack or Fail.
func (a *reappender) handle(out core.WriterOutput) {
	s := a.r.s
	for _, e := range out.Acks {
		a.acked = e.Offset
		s.res.Reappended++
		s.repair.lastWrite = s.now
		s.log.add("%s ACK %s %s", a.name(), sid(a.id), s.log.off(e.Offset))
	}
	for _, e := range out.Fails {
		s.log.add("%s FAIL %s: %v", a.name(), sid(a.id), e.Err)
	}
	for _, e := range out.Sends {
		a.send(e)
	}
	if len(out.Done) > 0 {
		a.over = true
		a.done(a.acked)
	}
}
