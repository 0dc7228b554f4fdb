package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/raidq/raidq/actors/core"
)

// The fan-out lease (actors/fanout job.run and hold.go), simulated:
// LeaseConfig.Holders nodes compete for the partition's lease in the KV,
// each on its own clock (skewed by seconds, drifting). A holder:
//
//   - reads the lease every TTL/3 (±10%) and judges another's lease
//     lapsed with core.LeaseWatch on its own clock (the revision stood
//     still for TTL since it first saw it); a failed read restarts the
//     watch. Free (absent, released, its own, or lapsed), it waits its
//     ensemble position times TTL/12 and takes it with a compare-and-set
//     on the revision it read;
//   - holding, it publishes until margin = TTL - TTL/5 after the start of
//     its last successful renewal (or the take), on its own clock, and
//     renews every TTL/3 with a compare-and-set; fenced, it stops at once.
//     Data is taken to flow all the time, so a holder whose deadline
//     passes stops publishing then (publisher.ok) and goes back to
//     reading the lease;
//   - crashes (kill: no release) and restarts with the same node id, or
//     stops gracefully (releases: Expires 0) and restarts later.
//
// Checks (checkLease): at most one holder publishes at any time (the
// holders' publishing intervals, in true time, never overlap), and the
// lease moves: no span without a publisher lasts longer than leaseGap
// after the last fault that could explain it (a holder's crash, stop,
// restart or cut-off, a KV stall, or the timeout, TTL, of a holder's call
// whose request or reply was lost: a renewal whose reply is lost blocks
// the hold loop for a TTL, so the holder stops publishing first).

// leaseRec is the lease's KV value (meta.Lease without the data).
type leaseRec struct {
	holder  string
	expires int64 // the holder's clock; 0: released
}

const leaseKey = "lease.fanout.sim.0"

// holder is one node's fan-out job for the partition.
type holder struct {
	s     *sim
	id    int // ensemble position
	name  string
	clk   actorClock
	up    bool
	epoch int   // bumped by every crash and stop: stale continuations do nothing
	start int64 // its clock when the job started: the watch's monotonic clock counts from it
	watch core.LeaseWatch

	holding  bool
	renewing bool   // a renewal is in flight
	rev      uint64 // the lease's revision as last written by this holder
	deadline int64  // holder clock: no publishing from then on
	lost     bool   // the deadline passed (publisher.ok failed)
	pubFrom  int64  // true time the current publishing began; -1: not publishing
	tick     int64  // true time of the hold ticker's tick being served
}

// leaseRun is the lease part of a run.
type leaseRun struct {
	holders   []*holder
	start     int64
	end       int64     // holders stop at end
	intervals []pubSpan // publishing, in true time
	faults    []int64   // true times of holder crashes, stops, restarts and cut-off edges
	last      string    // the holder that published last
	done      bool
}

// pubSpan is one holder's publishing interval [from, to).
type pubSpan struct {
	from, to int64
	holder   int
}

func (s *sim) leaseTTL() int64 { return int64(s.cfg.Lease.TTL) }

// leaseMargin is how long after a renewal started (or the take) a holder
// publishes, on its clock (fanout job.margin).
func (s *sim) leaseMargin() int64 { return s.leaseTTL() - s.leaseTTL()/5 }

// scheduleLease builds the holders and their faults.
func (s *sim) scheduleLease() {
	c := s.cfg.Lease
	l := &leaseRun{start: s.now + writeStart}
	s.lease = l
	span := s.faultSpan() + int64(4*time.Second)
	lastFault := l.start
	for i := range c.Holders {
		h := &holder{s: s, id: i, name: sprintf("h%d", i), clk: actorClock{skew: s.skew(c.Skew), ppm: s.ppmDraw(c.Drift)}, pubFrom: -1}
		l.holders = append(l.holders, h)
		s.at(l.start, h.begin)
	}
	// stops schedules n stops (graceful: a leave) of random holders, each
	// back after 1 s plus up to longest.
	stops := func(n int, graceful bool, longest time.Duration) {
		for range n {
			h := l.holders[s.rnd.IntN(len(l.holders))]
			at := l.start + s.leaseTTL() + s.rnd.Int64N(span)
			back := at + int64(time.Second) + s.rnd.Int64N(int64(longest))
			s.at(at, func() { h.crash(graceful) })
			s.at(back, h.begin)
			l.faults = append(l.faults, at, back)
			lastFault = max(lastFault, back)
		}
	}
	stops(c.Crashes, false, 7*time.Second)
	stops(c.Leaves, true, 4*time.Second)
	for range c.CutOffs {
		h := l.holders[s.rnd.IntN(len(l.holders))]
		s.planCutOff(h.name, l.start, l.start+span, 2*c.TTL)
		f := s.kv.cuts[h.name][len(s.kv.cuts[h.name])-1]
		l.faults = append(l.faults, f.from, f.to)
		lastFault = max(lastFault, f.to)
	}
	for _, f := range s.kv.stalls {
		lastFault = max(lastFault, f.to)
	}
	l.end = lastFault + 4*s.leaseTTL()
	s.at(l.end, s.leaseDone)
}

// ppmDraw draws a clock rate offset in [-limit, limit] ppm.
func (s *sim) ppmDraw(limit int64) int64 {
	if limit <= 0 {
		return 0
	}
	return s.rnd.Int64N(2*limit+1) - limit
}

func (s *sim) leaseDone() {
	l := s.lease
	for _, h := range l.holders {
		h.stopPublishing("run ends")
		h.up = false
		h.epoch++
	}
	l.done = true
	s.log.add("lease: holders stop")
}

func (h *holder) wall() int64 { return h.clk.at(h.s.now) }
func (h *holder) mono() int64 { return h.wall() - h.start }

// guard wraps a continuation so it does nothing after a crash or stop.
func (h *holder) guard(fn func()) func() {
	epoch := h.epoch
	return func() {
		if h.epoch == epoch && h.up {
			fn()
		}
	}
}

// sleep runs fn after d of the holder's clock.
func (h *holder) sleep(d int64, fn func()) { h.s.at(h.s.now+h.clk.span(d), h.guard(fn)) }

// call is a KV call of this holder, guarded.
func (h *holder) call(op kvOp, fn func(kvReply)) {
	epoch := h.epoch
	h.s.kv.call(h.name, op, h.clk.span(h.s.leaseTTL()), func(rep kvReply) {
		if h.epoch == epoch && h.up {
			fn(rep)
		}
	})
}

// jitter spreads d by ±10% (fanout.jitter).
func (h *holder) jitter(d int64) int64 { return d - d/10 + h.s.rnd.Int64N(d/5+1) }

// begin starts (or restarts) the holder's job.
func (h *holder) begin() {
	if h.s.lease.done {
		return
	}
	h.up = true
	h.epoch++
	h.start = h.wall()
	h.watch = core.LeaseWatch{}
	h.holding, h.renewing, h.lost = false, false, false
	h.s.log.add("%s starts its fan-out job (clock %s)", h.name, h.clk)
	h.run()
}

// run is one pass of job.run's loop: read the lease and take it if free.
func (h *holder) run() {
	s := h.s
	ttl := s.leaseTTL()
	h.call(kvOp{kind: kvGet, key: leaseKey}, func(rep kvReply) {
		mono := h.mono()
		if rep.err != nil {
			h.watch.Failed(mono)
			h.sleep(h.jitter(ttl/3), h.run)
			return
		}
		var cur leaseRec
		var rev uint64
		if rep.found {
			cur, rev = rep.entry.val.(leaseRec), rep.entry.rev
		}
		h.watch.Observe(mono, rev)
		lapsed := h.watch.Lapsed(mono, ttl)
		if s.cfg.inject.leaseExpiry {
			lapsed = h.wall() >= cur.expires
		}
		if !(rev == 0 || cur.holder == h.name || cur.expires == 0 || lapsed) {
			h.sleep(h.jitter(ttl/3), h.run)
			return
		}
		take := func() {
			start := h.wall()
			op := kvOp{kind: kvUpdate, key: leaseKey, val: leaseRec{holder: h.name, expires: start + ttl}, rev: rev}
			if rev == 0 {
				op.kind = kvCreate
			}
			h.call(op, func(rep kvReply) {
				if rep.err != nil {
					h.sleep(h.jitter(ttl/3), h.run)
					return
				}
				h.hold(rep.rev, start, cur.holder)
			})
		}
		if cur.holder != h.name && h.id > 0 {
			h.sleep(int64(h.id)*ttl/12, take)
			return
		}
		take()
	})
}

// hold starts a holding: publishing until the deadline, renewing every
// TTL/3.
func (h *holder) hold(rev uint64, start int64, prev string) {
	s := h.s
	l := s.lease
	h.holding, h.rev, h.lost, h.renewing = true, rev, false, false
	h.setDeadline(start + s.leaseMargin())
	s.res.LeaseTakes++
	if l.last != "" && l.last != h.name {
		s.res.LeaseMoves++
	}
	s.log.add("%s TAKES the lease (rev %d, previous holder %q), publishing until %s on its clock", h.name, rev, prev, s.log.off(uint64(h.deadline)))
	if h.wall() < h.deadline {
		h.pubFrom = s.now
		l.last = h.name
	}
	h.tick = s.now + h.clk.span(s.leaseTTL()/3)
	s.at(h.tick, h.guard(h.renew))
}

// setDeadline moves the publishing deadline and schedules its check.
func (h *holder) setDeadline(d int64) {
	h.deadline = d
	s := h.s
	s.at(h.clk.when(d), h.guard(func() {
		if h.holding && !h.lost && h.deadline == d {
			h.lost = true
			h.stopPublishing("lease not renewed in time")
			if !h.renewing {
				h.holding = false
				h.run()
			}
		}
	}))
}

// renew is one tick of the hold loop.
func (h *holder) renew() {
	s := h.s
	if !h.holding {
		return
	}
	if h.lost {
		h.holding = false
		h.run()
		return
	}
	start := h.wall()
	h.renewing = true
	op := kvOp{kind: kvUpdate, key: leaseKey, val: leaseRec{holder: h.name, expires: start + s.leaseTTL()}, rev: h.rev}
	h.call(op, func(rep kvReply) {
		h.renewing = false
		switch {
		case rep.err == errKVFenced:
			h.stopPublishing("lease taken by another node")
			h.holding = false
			h.run()
			return
		case rep.err == nil:
			h.rev = rep.rev
			if !h.lost {
				h.setDeadline(start + s.leaseMargin())
			}
		}
		if h.lost {
			h.holding = false
			h.run()
			return
		}
		// The ticker (TTL/3): its next tick, or at once if that passed
		// during the renewal (a Go ticker keeps one tick and drops more).
		period := h.clk.span(s.leaseTTL() / 3)
		h.tick += period
		next := h.tick
		if h.tick <= s.now {
			for h.tick+period <= s.now {
				h.tick += period
			}
			next = s.now
		}
		s.at(next, h.guard(h.renew))
	})
}

// stopPublishing closes the current publishing interval.
func (h *holder) stopPublishing(why string) {
	s := h.s
	if h.pubFrom < 0 {
		return
	}
	s.lease.intervals = append(s.lease.intervals, pubSpan{from: h.pubFrom, to: s.now, holder: h.id})
	s.log.add("%s stops publishing: %s", h.name, why)
	h.pubFrom = -1
}

// crash kills the holder's job (no release), or stops it gracefully
// (graceful: stop publishing, release the lease keeping its data).
func (h *holder) crash(graceful bool) {
	s := h.s
	if !h.up {
		return
	}
	h.stopPublishing(map[bool]string{true: "stopping", false: "crashed"}[graceful])
	if graceful && h.holding {
		op := kvOp{kind: kvUpdate, key: leaseKey, val: leaseRec{holder: h.name, expires: 0}, rev: h.rev}
		s.kv.call(h.name, op, h.clk.span(s.leaseTTL()), func(kvReply) {})
	}
	if !graceful {
		s.res.HolderCrashes++
	}
	h.up, h.holding = false, false
	h.epoch++
	s.log.add("%s %s", h.name, map[bool]string{true: "STOPS (releases the lease)", false: "CRASHES"}[graceful])
}

// leaseGap bounds a span without a publisher after the last fault that
// explains it: a watcher sees the dead holder's last revision within a
// read period (TTL/3 + 10%), judges it lapsed TTL later at its next read
// (another period), waits up to two steps of TTL/12 and takes it.
func (s *sim) leaseGap() int64 { return 2*s.leaseTTL() + int64(200*time.Millisecond) }

// checkLease: at most one holder publishes at once, and the lease moves.
func (s *sim) checkLease() {
	l := s.lease
	if l == nil {
		return
	}
	spans := slices.Clone(l.intervals)
	slices.SortFunc(spans, func(a, b pubSpan) int { return cmp.Compare(a.from, b.from) })
	reach, by := int64(0), -1
	for _, p := range spans {
		if by >= 0 && p.holder != by && p.from < reach {
			s.violate("lease: h%d and h%d published at once from %s to %s", by, p.holder, s.log.at(p.from), s.log.at(min(reach, p.to)))
		}
		if p.to > reach {
			reach, by = p.to, p.holder
		}
	}
	// Gaps, from the lease's start to its end.
	var faults []int64
	faults = append(faults, l.faults...)
	for _, f := range s.kv.stalls {
		faults = append(faults, f.from, f.to)
	}
	for _, h := range l.holders {
		// A lost message costs its call's whole timeout (TTL).
		for _, t := range s.kv.losses[h.name] {
			faults = append(faults, t+s.leaseTTL())
		}
	}
	slices.Sort(faults)
	covered := l.start
	check := func(g0, g1 int64) {
		from := g0
		for _, f := range faults {
			if f <= g1 {
				from = max(from, f)
			}
		}
		gap := g1 - from
		s.res.LeaseMaxGap = max(s.res.LeaseMaxGap, time.Duration(gap))
		if gap > s.leaseGap() {
			s.violate("lease: nobody published from %s to %s, %v after the last fault (%s), more than %v",
				s.log.at(g0), s.log.at(g1), time.Duration(gap).Round(time.Millisecond), s.log.at(from), time.Duration(s.leaseGap()))
		}
	}
	for _, p := range spans {
		if p.from > covered {
			check(covered, p.from)
		}
		covered = max(covered, p.to)
	}
	if covered < l.end {
		check(covered, l.end)
	}
}
