package sim

import (
	"fmt"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/stripe"
)

// producer is one simulated client writing the partition: the shipped
// producer (actors.Client.NewProducer, the producer actor around
// core.Writer) in a process of its own (pproc), over the simulated bus
// (bus_sim.go), on the producer's skewed clock (quantized in conflict
// mode). The loop hands it Config.Stripes batches at their scheduled
// times (Producer.SendBatch, one stripe each, ids the simulation names);
// what it writes reaches the truth from the wire (simBus.noteWrite: every
// attempt's offset), its outcomes through the batches' callbacks. It is
// done once every batch has its outcome and the producer's writer holds
// no stripe any more (Producer.Ticking: a committed stripe stays a while,
// listening for late refusals that call for a rewrite).
type producer struct {
	s     *sim
	id    int
	pid   stripe.ProducerID
	skew  int64
	proc  *pproc
	seq   uint64
	ended int // batches with an outcome (acked or failed)
	done  bool
}

// pproc is one producer process: a client process (cproc) running one
// shipped producer.
type pproc struct {
	*cproc
	prod *actors.Producer
}

func newProducer(s *sim, id int, skew int64) *producer {
	p := &producer{s: s, id: id, skew: skew}
	p.pid[0] = byte(id + 1)
	p.pid[15] = 0x5a
	return p
}

// schedule starts the producer's process and queues its stripes. In
// conflict mode every producer uses the same start times.
func (p *producer) schedule() {
	s := p.s
	gap := int64(s.cfg.StripeEvery)
	t := s.now + writeStart
	s.at(t, p.start)
	for range s.cfg.Stripes {
		s.at(t, p.startStripe)
		if s.cfg.ConflictQuantum > 0 {
			t += gap
		} else {
			t += gap/2 + s.rnd.Int64N(gap+1)
		}
	}
}

// start runs the producer's process (on the loop). The producer's topic
// has no offset grid under the ignoreGrid bug.
func (p *producer) start() {
	s := p.s
	name := p.name()
	cat := newSimCatalog(s)
	if s.cfg.inject.ignoreGrid {
		cat.t.Params.Grid = 0
	}
	skew, quantum, b := p.skew, int64(s.cfg.ConflictQuantum), s.bubble
	cp, err := s.newClientProc(name, cat, func() int64 {
		c := b.trueNow() + skew
		if quantum > 0 {
			c -= c % quantum
		}
		return c
	})
	if err != nil {
		s.violate("%s: client: %v", name, err)
		return
	}
	cp.bus.producer = p
	pp := &pproc{cproc: cp}
	prod, err := pp.client.NewProducer(actors.ProducerConfig{Topic: simTopic, Seed: s.rnd.Uint64() | 1,
		MaxInflight: s.cfg.Stripes + 1, MaxQueuedBatches: s.cfg.Stripes + 1})
	if err != nil {
		s.violate("%s: producer: %v", name, err)
		s.bubble.wg.Go(pp.close)
		return
	}
	pp.prod = prod
	p.proc = pp
}

// startStripe makes the next batch and hands it to the producer.
func (p *producer) startStripe() {
	s := p.s
	p.seq++
	id := stripe.ID{Producer: p.pid, Seq: p.seq}
	recs := make([]stripe.Record, 1+s.rnd.IntN(s.cfg.MaxRecords))
	var values []string
	for k := range recs {
		v := fmt.Sprintf("p%d-s%d-r%d", p.id, p.seq, k)
		recs[k] = stripe.Record{Key: []byte(fmt.Sprint(p.id)), Value: []byte(v)}
		values = append(values, v)
		s.truth.byValue[v] = id
	}
	s.truth.values[id] = values
	s.truth.started[id] = s.now
	s.res.Stripes++
	s.log.add("p%d start %s records=%d", p.id, sid(id), len(recs))
	pp := p.proc
	if pp == nil {
		s.truth.failed[id] = fmt.Errorf("no producer process")
		p.outcome()
		return
	}
	pp.prod.SendBatch(recs, 0, id, func(r actors.SendResult) {
		pp.post(func() { p.result(id, r) })
	})
}

// result takes a batch's outcome (on the loop).
func (p *producer) result(id stripe.ID, r actors.SendResult) {
	s := p.s
	if r.Err != nil {
		s.truth.failed[id] = r.Err
		s.log.add("p%d FAIL %s: %v", p.id, sid(id), r.Err)
	} else {
		s.truth.acked[id] = r.Pos.Offset
		s.log.add("p%d ACK %s %s", p.id, sid(id), s.log.off(r.Pos.Offset))
	}
	s.truth.ended[id] = s.now
	p.outcome()
}

// outcome counts a batch's outcome and, after the last, waits for the
// writer to let go of every stripe.
func (p *producer) outcome() {
	p.ended++
	if p.ended == p.s.cfg.Stripes {
		p.waitIdle()
	}
}

// waitIdle is an event every tickEvery until the producer's writer holds
// no stripe: then no rewrite can follow, and the producer is done.
func (p *producer) waitIdle() {
	if p.done {
		return
	}
	if pp := p.proc; pp != nil && pp.prod.Ticking() {
		p.s.at(p.s.now+tickEvery, p.waitIdle)
		return
	}
	p.done = true
	p.s.log.add("p%d done", p.id)
	p.stop()
	p.s.producerDone()
}

// stop ends the producer's process from the loop, without waiting.
func (p *producer) stop() {
	if pp := p.proc; pp != nil {
		p.proc = nil
		p.s.bubble.wg.Go(pp.close)
	}
}

// inFlight is how many batches have no outcome yet (for a stuck run).
func (p *producer) inFlight() int { return p.s.cfg.Stripes - p.ended }

func (p *producer) name() string { return sprintf("p%d", p.id) }

// stopProducers closes every producer process still running (a run that
// ended stuck), so the bubble ends with no goroutine left.
func (s *sim) stopProducers() {
	if s.bubble == nil {
		return
	}
	for _, p := range s.prods {
		p.stop()
	}
}
