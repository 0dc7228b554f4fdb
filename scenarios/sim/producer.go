package sim

import (
	"fmt"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// producer is one simulated client writing one partition through a
// core.Writer. Its clock is skewed (and quantized in conflict mode); it
// starts Config.Stripes stripes, carries out the writer's output and
// ticks it every tickEvery.
type producer struct {
	s      *sim
	id     int
	pid    stripe.ProducerID
	skew   int64
	w      *core.Writer
	seq    uint64
	shards map[stripe.ID][]stripe.Shard // encoded for the first attempt; Reshard for others
	ended  int                          // stripes done (acked or failed, and released)
	done   bool
}

func newProducer(s *sim, id int, skew int64) *producer {
	params := s.params
	if s.cfg.inject.ignoreGrid {
		params.Grid = 0
	}
	p := &producer{s: s, id: id, skew: skew, w: core.NewWriter(core.DefaultWriterConfig(params)), shards: map[stripe.ID][]stripe.Shard{}}
	p.pid[0] = byte(id + 1)
	p.pid[15] = 0x5a
	return p
}

// clock is the producer's view of time: skewed, and quantized in
// conflict mode.
func (p *producer) clock() int64 {
	c := p.s.now + p.skew
	if q := int64(p.s.cfg.ConflictQuantum); q > 0 {
		c -= c % q
	}
	return c
}

// schedule queues the producer's stripes and its first tick. In conflict
// mode every producer uses the same start times.
func (p *producer) schedule() {
	s := p.s
	gap := int64(s.cfg.StripeEvery)
	t := s.now + writeStart
	for range s.cfg.Stripes {
		s.at(t, p.startStripe)
		if s.cfg.ConflictQuantum > 0 {
			t += gap
		} else {
			t += gap/2 + s.rnd.Int64N(gap+1)
		}
	}
	s.at(s.now+writeStart, p.tick)
}

// startStripe encodes the next batch and hands it to the writer.
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
	payload, err := stripe.AppendBatch(nil, recs)
	if err != nil {
		s.violate("p%d: batch: %v", p.id, err)
		return
	}
	snd := p.w.Start(p.clock(), id)
	shards, err := stripe.Encode(id, snd.Offset, s.cfg.Nodes, s.cfg.K, payload)
	if err != nil {
		s.violate("p%d: encode: %v", p.id, err)
		return
	}
	p.shards[id] = shards
	s.log.add("p%d start %s records=%d", p.id, sid(id), len(recs))
	p.send(snd)
}

// send carries out a Send: shard i goes to node i.
func (p *producer) send(snd core.Send) {
	s := p.s
	s.truth.offsets[snd.ID] = append(s.truth.offsets[snd.ID], snd.Offset)
	s.truth.maxOffset = max(s.truth.maxOffset, snd.Offset)
	s.log.add("p%d send %s#%d %s", p.id, sid(snd.ID), snd.Attempt, s.log.off(snd.Offset))
	shards := stripe.Reshard(p.shards[snd.ID], snd.Offset)
	for i, n := range s.nodes {
		b := shards[i].Marshal()
		copies := 1
		if s.rnd.Float64() < s.cfg.DupRate {
			copies = 2
		}
		for range copies {
			s.send(n.slow, func() string { return sprintf("p%d->n%d write %s#%d", p.id, i, sid(snd.ID), snd.Attempt) },
				func() { n.write(p, snd, b) })
		}
	}
}

// reply hands a node's answer to the writer. In conflict mode producers
// learn node clocks only from refusals, so they keep sharing one offset.
func (p *producer) reply(snd core.Send, node int, st core.Status, nodeClock int64) {
	if p.s.cfg.ConflictQuantum > 0 && st != core.StatusClockAhead && st != core.StatusSealed {
		nodeClock = 0
	}
	switch st {
	case core.StatusConflict:
		p.s.res.Conflicts++
	case core.StatusSealed:
		p.s.res.Sealed++
	case core.StatusClockAhead:
		p.s.res.Ahead++
	}
	p.s.log.add("p%d reply n%d %s#%d %s", p.id, node, sid(snd.ID), snd.Attempt, st)
	p.handle(p.w.Reply(p.clock(), p.s.rnd, snd.ID, snd.Attempt, node, st, nodeClock))
}

func (p *producer) name() string { return sprintf("p%d", p.id) }

func (p *producer) tick() {
	if p.done {
		return
	}
	p.handle(p.w.Tick(p.clock(), p.s.rnd))
	p.s.at(p.s.now+tickEvery, p.tick)
}

// handle carries out the writer's output, in WriterOutput's order (acks,
// fails, sends, dones): a Send after its stripe's Ack is a rewrite.
func (p *producer) handle(out core.WriterOutput) {
	s := p.s
	for _, e := range out.Acks {
		s.truth.acked[e.ID] = e.Offset
		s.truth.ended[e.ID] = s.now
		s.log.add("p%d ACK %s %s", p.id, sid(e.ID), s.log.off(e.Offset))
	}
	for _, e := range out.Fails {
		s.truth.failed[e.ID] = e.Err
		s.truth.ended[e.ID] = s.now
		s.log.add("p%d FAIL %s: %v", p.id, sid(e.ID), e.Err)
	}
	for _, e := range out.Sends {
		if _, acked := s.truth.acked[e.ID]; acked {
			s.res.Rewrites++
		} else {
			s.res.Retries++
		}
		p.send(e)
	}
	for _, e := range out.Done {
		delete(p.shards, e.ID)
		p.ended++
		p.finish()
	}
}

// finish marks the producer done once every stripe is started and done.
func (p *producer) finish() {
	if p.done || p.ended < p.s.cfg.Stripes || p.w.InFlight() > 0 {
		return
	}
	p.done = true
	p.s.log.add("p%d done", p.id)
	p.s.producerDone()
}
