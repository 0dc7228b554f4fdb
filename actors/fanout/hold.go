package fanout

import (
	"errors"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// interestEvery is how often a holder checks whether anyone subscribes.
const interestEvery = 250 * time.Millisecond

// hold keeps the lease while it is this node's; it returns when the job
// stops or the lease is lost. While someone subscribes to the partition's
// deliver subject (Config.Interest), a reader publishes every record;
// while no one does, no reader runs.
//
// Why idle: the fan-out reader scans k nodes' shards, decodes and
// publishes every record, which cost a node cluster about a tenth of its
// CPU in the benchmark, all for a subject nobody listened to. Core NATS
// delivers nothing to a subscriber that is not there, so skipping that
// work loses nothing. Resuming is careful about the one thing a subscriber
// can see: while idle, the holder notes the time of each check that found
// no interest, and publishing resumes from that time minus the read delay
// (see margin). That is before the new subscriber subscribed, so it sees
// every record produced after it subscribed, as it would have with a
// reader running all along.
// The lease records the resume position while idle, so a takeover starts
// there too.
func (j *job) hold(l meta.Lease, rev uint64, acquired time.Time) {
	from, err := decodePos(l.Data)
	if err != nil {
		j.log.Warn("fan-out lease holds a bad position; starting from the topic's creation", "data", string(l.Data), "err", err)
	}
	j.takeovers.Add(1)
	j.log.Info("fan-out lease acquired", "from", from.String(), "previous_holder", l.Holder)
	h := &holding{j: j, pos: from, deadline: acquired.Add(j.margin())}
	defer h.idleEnd()
	if !h.follow() {
		j.release(rev, from)
		return
	}
	t := time.NewTicker(j.ttl() / 3)
	defer t.Stop()
	var check <-chan time.Time
	if j.m.cfg.Interest != nil {
		ct := time.NewTicker(interestEvery)
		defer ct.Stop()
		check = ct.C
	}
	for {
		switch h.next(t.C, check) {
		case holdQuit:
			h.stopReader()
			if !j.kill.Load() {
				j.release(rev, h.position())
			}
			return
		case holdLost:
			why := h.p.why()
			h.stopReader()
			j.log.Warn("fan-out stopped publishing", "why", why, "next", h.position().String())
			return
		case holdCheck:
			if !h.follow() {
				j.release(rev, h.position())
				return
			}
		case holdRenew:
			start := j.m.cfg.Now()
			ctx, cancel := j.ctx()
			nrev, err := j.m.cfg.Meta.RenewLease(ctx, j.lease, j.m.cfg.NodeID, j.ttl(), start, rev, encodePos(h.position()))
			cancel()
			switch {
			case errors.Is(err, meta.ErrFenced):
				h.stopReader()
				j.log.Warn("fan-out lease taken by another node: stopped publishing", "next", h.position().String())
				return
			case err != nil:
				j.log.Warn("renewing fan-out lease", "err", err)
			default:
				rev = nrev
				h.extend(start.Add(j.margin()))
			}
		}
	}
}

// holdEvent is what the hold loop does next.
type holdEvent int

const (
	holdQuit holdEvent = iota
	holdLost
	holdCheck
	holdRenew
)

// next waits for the hold loop's next event. A stop, then a lost
// publisher, come before a renewal or an interest check that is also due
// (after a renewal that took long, a tick is waiting): renewing a lease
// whose publishing already ended is pointless, and a fixed order is what
// lets the simulation replay a seed (Go picks among ready cases at random).
func (h *holding) next(tick, check <-chan time.Time) holdEvent {
	select {
	case <-h.j.quit:
		return holdQuit
	default:
	}
	select {
	case <-h.lost():
		return holdLost
	default:
	}
	select {
	case <-h.j.quit:
		return holdQuit
	case <-h.lost():
		return holdLost
	case <-check:
		return holdCheck
	case <-tick:
		return holdRenew
	}
}

// holding is one lease holding: publishing (p and r set) or idle.
// Only the hold goroutine uses it.
type holding struct {
	j        *job
	p        *publisher
	r        PartitionReader
	pos      core.Position // idle: where publishing resumes
	deadline time.Time     // the lease's publishing deadline
}

// follow starts or stops the reader to match the subscribers' interest;
// false if a reader was needed and did not start.
func (h *holding) follow() bool {
	j := h.j
	want := j.m.cfg.Interest == nil || j.m.cfg.Interest(j.subject)
	switch {
	case want && h.p == nil:
		return h.startReader()
	case !want && h.p != nil:
		h.stopReader()
		j.log.Info("no subscribers: fan-out idle", "resume_from", h.pos.String())
		fallthrough
	case !want:
		h.idleAt(core.Position{Offset: uint64(max(j.m.cfg.Now().UnixNano()-int64(h.margin()), 0))})
	}
	return true
}

// margin is how far behind this node's clock a record written from now on
// may be: an owner refuses offsets older than its clock minus the accept
// window A, and the nodes' clocks differ by up to the skew budget
// (docs/design.md#the-arithmetic), so A plus the skew (or D, if larger).
func (h *holding) margin() time.Duration {
	if t, err := h.j.m.cfg.Catalog.Topic(h.j.k.topic); err == nil && t.Params.AcceptWindow > 0 {
		return max(t.Params.ReadDelay, t.Params.AcceptWindow+t.Params.MaxSkew)
	}
	return 5 * time.Second
}

func (h *holding) startReader() bool {
	j := h.j
	h.idleEnd()
	p := newPublisher(j, h.pos, h.deadline)
	r, err := j.m.cfg.Readers.NewReader(actors.ReaderConfig{Topic: j.k.topic, Partition: j.k.partition, From: h.pos, Sink: p.sink})
	if err != nil {
		j.log.Warn("fan-out reader did not start", "err", err)
		return false
	}
	h.p, h.r = p, r
	j.cur.Store(p)
	j.log.Info("fan-out publishing", "from", h.pos.String())
	return true
}

// stopReader stops a running reader; its flushed position is where
// publishing would resume.
func (h *holding) stopReader() {
	if h.p == nil {
		return
	}
	h.p.halt()
	h.r.Close()
	h.pos = h.served()
	h.j.cur.Store(nil)
	h.p, h.r = nil, nil
}

// idleAt moves the resume position up to pos (never back) while idle.
func (h *holding) idleAt(pos core.Position) {
	if h.pos.Less(pos) {
		h.pos = pos
	}
	p := h.pos
	h.j.idle.Store(&p)
}

func (h *holding) idleEnd() { h.j.idle.Store(nil) }

func (h *holding) extend(deadline time.Time) {
	h.deadline = deadline
	if h.p != nil {
		h.p.extend(deadline)
	}
}

// lost is the running publisher's lost channel; nil (never ready) while idle.
func (h *holding) lost() <-chan struct{} {
	if h.p == nil {
		return nil
	}
	return h.p.lost
}

// position is what the lease records: how far the subscribers have been served.
func (h *holding) position() core.Position {
	if h.p != nil {
		return h.served()
	}
	return h.pos
}

// served is the publisher's flushed position, held back at the reader's
// lowest unresolved in-doubt offset: a successor resumes there, so a
// stripe this holder could not decode yet is not lost with it.
func (h *holding) served() core.Position {
	pos := h.p.flushedPos()
	if low := h.r.LowWater(); low.Less(pos) {
		return low
	}
	return pos
}
