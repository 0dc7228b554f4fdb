package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/raidq/raidq/actors/fanout"
	"github.com/raidq/raidq/bus/meta"
)

// The fan-out lease, as shipped: LeaseConfig.Holders nodes each run an
// actors/fanout Manager (the code a node runs: job.run, hold.go, the
// publisher) for the simulation's one partition, in the bubble
// (bubble.go), each on its own clock (skewed by seconds, drifting). Its
// ports are simulated (lease_ports.go): the leases live in the simulated
// KV with its stalls, cut-offs and lost messages; its reader is a stand-in
// that hands the publisher one record every pubEvery while it runs (data
// flows all the time); its bus records each publish at the true time.
// Holders crash (Manager.Kill: no release; the process's ports die with
// it, so nothing it does afterwards reaches the world) and restart with
// the same node id, or stop gracefully (Manager.Stop: releases the lease
// keeping its position) and restart later.
//
// Checks (checkLease): at most one holder publishes at any time (the
// holders' publishing spans, in true time, never overlap), and the lease
// moves: no span without a publisher lasts longer than leaseGap after the
// last fault that could explain it (a holder's crash, stop, restart or
// cut-off, a KV stall, or the timeout, TTL, of a holder's call whose
// request or reply was lost: a renewal whose reply is lost blocks the
// hold loop for a TTL, so the holder stops publishing first).

// leaseTopic is the partition whose fan-out the holders compete for.
const leaseTopic = "sim"

// holder is one node's fan-out Manager, across its restarts.
type holder struct {
	s    *sim
	id   int // ensemble position
	name string
	clk  actorClock
	inc  *incarnation // the running process; nil while down
	runs int          // processes started
}

// leaseRun is the lease part of a run.
type leaseRun struct {
	holders []*holder
	incs    []*incarnation // every process that ran, for the checks
	catalog *meta.StaticCatalog
	start   int64
	end     int64   // holders stop at end
	faults  []int64 // true times of holder crashes, stops, restarts and cut-off edges
	done    bool
}

// pubSpan is one holder's publishing span [from, to] in true time: its
// publishes no more than pubGap apart.
type pubSpan struct {
	from, to int64
	holder   int
}

func (s *sim) leaseTTL() int64 { return int64(s.cfg.Lease.TTL) }

// scheduleLease builds the holders, the topic they serve and their faults.
func (s *sim) scheduleLease() {
	c := s.cfg.Lease
	l := &leaseRun{start: s.now + writeStart, catalog: meta.NewStaticCatalog()}
	s.lease = l
	ens := make([]string, 0, s.params.N)
	span := s.faultSpan() + int64(4*time.Second)
	lastFault := l.start
	for i := range c.Holders {
		h := &holder{s: s, id: i, name: sprintf("h%d", i), clk: actorClock{skew: s.skew(c.Skew), ppm: s.ppmDraw(c.Drift)}}
		l.holders = append(l.holders, h)
		ens = append(ens, h.name)
		s.at(l.start, h.begin)
	}
	for i := len(ens); i < s.params.N; i++ {
		ens = append(ens, sprintf("x%d", i)) // ensemble members that run no fan-out here
	}
	t := &meta.Topic{Name: leaseTopic, Partitions: 1, Params: s.params, Ensembles: [][]string{ens}, Created: uint64(epoch0)}
	if err := l.catalog.Put(t); err != nil {
		panic(sprintf("sim: lease topic: %v", err))
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

// leaseDone ends the holders' processes (as crashes: a release now would
// only be cut short).
func (s *sim) leaseDone() {
	l := s.lease
	for _, h := range l.holders {
		h.stop(false, "run ends")
	}
	l.done = true
	s.log.add("lease: holders stop")
}

// begin starts (or restarts) the holder's process: a fresh Manager.
func (h *holder) begin() {
	s := h.s
	if s.lease.done {
		return
	}
	if h.inc != nil { // a graceful stop still releasing: the old process is gone now
		h.stop(false, "restarted")
	}
	h.runs++
	in := newIncarnation(h, s.rnd.Uint64()|1)
	s.lease.incs = append(s.lease.incs, in)
	m, err := fanout.Start(fanout.Config{NodeID: h.name, Cluster: "sim", Conn: in, Meta: in, Catalog: s.lease.catalog,
		Readers: in, Logger: in.logger(), Now: in.clock, LeaseTTL: s.cfg.Lease.TTL, Seed: in.seed,
		Bugs: fanout.Bugs{LapsedByExpiry: s.cfg.inject.leaseExpiry}})
	if err != nil {
		panic(sprintf("sim: fanout.Start: %v", err))
	}
	in.m = m
	h.inc = in
	s.log.add("%s starts its fan-out Manager (%s, clock %s)", h.name, in.tag, h.clk)
}

// crash kills the holder's process (no release), or stops it gracefully
// (its Manager releases the lease, keeping its data).
func (h *holder) crash(graceful bool) {
	s := h.s
	if h.inc == nil {
		return
	}
	if !graceful {
		s.res.HolderCrashes++
	}
	h.stop(graceful, map[bool]string{true: "STOPS (releases the lease)", false: "CRASHES"}[graceful])
}

// stop ends the running process: Stop (graceful) lets its Manager release
// the lease through live ports, the process dying once Stop returns; Kill
// kills its ports first, so nothing it does afterwards is seen.
func (h *holder) stop(graceful bool, why string) {
	s, in := h.s, h.inc
	if in == nil {
		return
	}
	h.inc = nil
	s.log.add("%s %s", h.name, why)
	if !graceful {
		in.die()
	}
	s.bubble.wg.Go(func() {
		if graceful {
			in.m.Stop()
			in.die()
		} else {
			in.m.Kill()
		}
	})
}

// stopDrivers ends every process still running and waits until their
// goroutines are gone (a bubble must be empty when its test returns).
func (s *sim) stopDrivers() {
	if s.bubble == nil {
		return
	}
	if l := s.lease; l != nil {
		for _, h := range l.holders {
			h.stop(false, "run ends")
		}
		for _, in := range l.incs {
			in.die()
		}
	}
	s.stopGroup()
	s.bubble.wg.Wait()
	s.system.Shutdown() // every client in it is closed
}

// pubGap: a holder's publishes at most this far apart form one span.
const pubGap = 3 * pubEvery

// spans is every holder's publishing, in spans, by start.
func (l *leaseRun) spans() []pubSpan {
	var out []pubSpan
	for _, in := range l.incs {
		for _, t := range in.published() {
			if n := len(out); n > 0 && out[n-1].holder == in.h.id && t-out[n-1].to <= pubGap {
				out[n-1].to = t
				continue
			}
			out = append(out, pubSpan{from: t, to: t, holder: in.h.id})
		}
	}
	slices.SortFunc(out, func(a, b pubSpan) int { return cmp.Compare(a.from, b.from) })
	return out
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
	spans := l.spans()
	reach, by := int64(0), -1
	for i, p := range spans {
		if i > 0 && spans[i-1].holder != p.holder {
			s.res.LeaseMoves++
		}
		if by >= 0 && p.holder != by && p.from <= reach {
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
