package sim

import (
	"errors"
	"slices"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// minUptime is how long a node stays up between two of its crashes, so
// that rescans reach it within the readers' in-doubt wait.
const minUptime = int64(time.Second)

// crashKind is how a crashed node looks to the others; each crash draws
// its own (Config.FailFast).
type crashKind uint8

const (
	// hung: requests vanish and the requester waits for its timeout (a
	// frozen machine, a partition).
	hung crashKind = iota
	// failFast: the node's port refuses, so every request fails at once (a
	// killed process: the NATS request returns "no responders"). Requests
	// the node had taken before it died still vanish.
	failFast
)

func (k crashKind) String() string {
	if k == failFast {
		return "fail-fast"
	}
	return "hung"
}

// outage is one planned crash of one node.
type outage struct {
	node       int
	start, end int64
	kind       crashKind
	what       string // "crash", "long", "quorum-loss" or "wipe"
	back       int64  // a wipe: how far the node's clock is set back when it is reborn
}

// window is a span of true time [from, to).
type window struct{ from, to int64 }

// scheduleCrashes plans the outages and queues them: first the quorum-loss
// window (Config.QuorumLoss), then Config.LongCrashes, then Config.Crashes,
// all within the writes and the second and a half after them. Outside the
// window at most n-W nodes are down at once, and a node stays up minUptime
// between two of its crashes; crashes that do not fit are dropped.
func (s *sim) scheduleCrashes() {
	var plan []outage
	if s.cfg.QuorumLoss > 0 {
		plan = s.planQuorumLoss()
	}
	if s.cfg.Wipes > 0 {
		plan = s.planWipes(plan) // before the crashes, which must fit around them
	}
	wait := core.DefaultReaderConfig(s.params).InDoubtWait
	plan = s.planCrashes(plan, s.cfg.LongCrashes, wait+int64(100*time.Millisecond), int64(s.cfg.MaxLongCrash), "long")
	plan = s.planCrashes(plan, s.cfg.Crashes, int64(10*time.Millisecond), int64(s.cfg.MaxCrash), "crash")
	s.outages = plan
	for _, o := range plan {
		n := s.nodes[o.node]
		s.at(o.start, func() { n.crash(o) })
		s.at(o.end, func() { n.restart(o) })
	}
}

// planCrashes adds up to count crashes of minLen to maxLen that fit.
func (s *sim) planCrashes(plan []outage, count int, minLen, maxLen int64, what string) []outage {
	span := s.faultSpan()
	for range count {
		for try := 0; try < 10; try++ {
			o := outage{node: s.rnd.IntN(s.cfg.Nodes), start: s.now + s.rnd.Int64N(span), what: what}
			o.end = o.start + minLen + s.rnd.Int64N(max(maxLen-minLen, 1))
			if s.fits(plan, o) {
				o.kind = s.crashKind()
				plan = append(plan, o)
				break
			}
		}
	}
	return plan
}

// planQuorumLoss takes n-W+1 nodes down together, during the writes, for
// Config.QuorumLoss (each node within 20 ms of the others).
func (s *sim) planQuorumLoss() []outage {
	jitter := int64(20 * time.Millisecond)
	writes := int64(s.cfg.Stripes) * int64(s.cfg.StripeEvery)
	start := s.now + writeStart + s.rnd.Int64N(max(writes, 1))
	var plan []outage
	var down []int
	w := window{from: start + jitter, to: start + int64(s.cfg.QuorumLoss)}
	for _, i := range s.rnd.Perm(s.cfg.Nodes)[:s.params.WriteTolerance()+1] {
		o := outage{node: i, start: start + s.rnd.Int64N(jitter), end: w.to + s.rnd.Int64N(jitter), what: "quorum-loss"}
		o.kind = s.crashKind()
		plan = append(plan, o)
		down = append(down, i)
		w.from, w.to = min(w.from, o.start), max(w.to, o.end)
	}
	slices.Sort(down)
	s.lossWindows = append(s.lossWindows, w)
	s.at(w.from, func() {
		s.res.QuorumLosses++
		s.log.add("QUORUM LOSS: n%s go down together until ~%s (more than n-W=%d): no write can commit",
			nodeList(down), s.log.at(w.to), s.params.WriteTolerance())
	})
	return plan
}

// crashKind draws how one crash fails (no draw when FailFast is off, so
// older configs replay as before).
func (s *sim) crashKind() crashKind {
	if s.cfg.FailFast > 0 && s.rnd.Float64() < s.cfg.FailFast {
		return failFast
	}
	return hung
}

// fits reports whether o keeps the plan within the fault model. It counts
// every other outage overlapping o as down for all of o (conservative), so
// no crash overlaps a quorum-loss window. A wiped node counts as down from
// its wipe on, for good (no repair refills it), and is not crashed again.
func (s *sim) fits(plan []outage, o outage) bool {
	down := 0
	end := func(x outage) int64 {
		if x.what == "wipe" {
			return runLimit + epoch0
		}
		return x.end
	}
	for _, p := range plan {
		if p.node == o.node && p.start < end(o)+minUptime && o.start < end(p)+minUptime {
			return false
		}
		if p.start < end(o) && o.start < end(p) {
			down++
		}
	}
	return down+1 <= s.params.WriteTolerance()
}

// crash loses memory and the durability queue; restart brings the node
// back with what is on disk.
func (n *node) crash(o outage) {
	s := n.s
	n.up = false
	n.kind = o.kind
	n.epoch++
	n.owners = map[uint64]*core.Owner{}
	n.mem = map[uint64]core.SlotInfo{}
	n.synced = s.now
	s.res.Crashes++
	if o.what == "long" {
		s.res.LongCrashes++
	}
	s.log.add("n%d CRASH %s (%s, %v, until %s)", n.id, o.kind, o.what, time.Duration(o.end-o.start).Round(time.Millisecond), s.log.at(o.end))
	if o.what == "wipe" {
		n.wipe()
	}
}

func (n *node) restart(o outage) {
	if o.what == "wipe" {
		n.reborn(o)
	}
	if step := n.s.cfg.StepBack; step > 0 {
		// The node comes back with its clock stepped back (an NTP step,
		// a bad RTC): its durable floor keeps it refusing what it closed.
		back := n.s.rnd.Int64N(int64(step))
		n.skew -= back
		n.s.log.add("n%d clock stepped back %v on restart", n.id, time.Duration(back).Round(time.Millisecond))
		n.s.at(n.s.now+int64(time.Second)+n.s.rnd.Int64N(int64(time.Second)), func() {
			n.skew += back // set right again, as NTP would
			n.s.log.add("n%d clock set right (+%v)", n.id, time.Duration(back).Round(time.Millisecond))
		})
	}
	n.startFloor()
	n.restartAlter()
	n.up = true
	n.s.log.add("n%d restart after %v %s %s", n.id, time.Duration(o.end-o.start).Round(time.Millisecond), o.kind, o.what)
}

// down handles a request that reached the node while it is down, and
// reports whether it was: a hung node loses the request; a fail-fast one
// has it answered at once with "no responders" (reply, sent back over the
// network, which may lose it too).
func (n *node) down(what func() string, reply func()) bool {
	s := n.s
	if n.up {
		return false
	}
	if n.kind == hung {
		s.log.add("n%d down (hung): lost %s", n.id, what())
		return true
	}
	s.res.Refused++
	s.log.add("n%d down (fail-fast): %s -> no responders", n.id, what())
	s.send(false, func() string { return sprintf("no-responders to %s at n%d", what(), n.id) }, reply)
	return true
}

// failureExcused reports whether a failed send is allowed, and logs why:
// some attempt of it ran while a quorum-loss window was open. It must then
// have failed with a clear error (too few nodes, or timed out); any other
// error is a violation of its own.
func (s *sim) failureExcused(id stripe.ID, err error) bool {
	life := window{from: s.truth.started[id], to: s.truth.ended[id] + 1}
	for _, w := range s.lossWindows {
		if life.from >= w.to || w.from >= life.to {
			continue
		}
		if !errors.Is(err, core.ErrNotEnoughNodes) && !errors.Is(err, core.ErrTimeout) {
			s.violate("%s failed during the quorum loss %s-%s with an unclear error: %v", sid(id), s.log.at(w.from), s.log.at(w.to), err)
			return true
		}
		s.res.Excused++
		s.log.add("excused: %s failed, attempted during the quorum loss %s-%s: %v", sid(id), s.log.at(w.from), s.log.at(w.to), err)
		return true
	}
	return false
}
