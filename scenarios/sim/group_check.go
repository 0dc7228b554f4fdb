package sim

import (
	"slices"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

// The consumer group's world and checks (group.go has the members).
//
// Checks:
//   - at-least-once: every acked record is delivered by some member while
//     it held the partition (the union of the members' deliveries); one a
//     wipe left unreadable (wipe.go) holds the group's position at it;
//   - revoke before assign: a member never claims the partition, nor
//     delivers from it, while another member holds it, is up and is not
//     paused. The protocol promises it within its fault model, cut-offs
//     and crashes included, with no exception: a member that cannot
//     heartbeat pauses PauseAfter(session) = 3/4 session after its last
//     heartbeat returned, while another claims only once the session has
//     passed on its own clock since it first saw that heartbeat's
//     revision, which is later. Clock rates differ by at most
//     GroupConfig.Drift (up to 2%), well inside the quarter session;
//   - commits never pass an in-doubt offset the committing reader has not
//     resolved (by the reader's reports, not its LowWater);
//   - without member or KV faults (joins and leaves allowed), no record is
//     delivered twice at the same position, unless a release was held
//     back at an in-doubt offset (the successor re-reads from there);
//   - the group finishes: after the writes and every planned fault, the
//     record's owner holds the partition, delivering, caught up with the
//     end of the writes (stuck reports it otherwise).

// group is the consumer group of a run.
type group struct {
	s        *sim
	slots    []*member
	done     bool
	faultEnd int64 // three rounds after the last planned group or KV fault event
	gens     int
	got      []gdelivery
	capped   bool            // some release or commit was held back at LowWater
	overlaps map[string]bool // member pairs reported overlapping (once each)
	fresh    map[int]int     // fresh ids drawn per slot
}

// gdelivery is one record a member delivered.
type gdelivery struct {
	value  string
	id     stripe.ID
	pos    core.Position
	at     int64
	member string
	gen    int
	late   bool
}

// scheduleGroup creates the member processes and plans their faults:
// crashes (back after 0.5-6 s, half of them under a fresh id), leaves
// (back after 1-5 s under a fresh id) and KV cut-offs, each slot at most
// one fault at a time, and one member cut off at a time.
func (s *sim) scheduleGroup() {
	c := s.cfg.Group
	g := &group{s: s, overlaps: map[string]bool{}, fresh: map[int]int{}}
	s.group = g
	start := s.now + writeStart/2
	for i := range c.Members {
		m := &member{g: g, s: s, slot: i, name: sprintf("s%d", i), clk: actorClock{skew: s.skew(c.Skew), ppm: s.ppmDraw(c.Drift)}}
		m.id = g.freshID(i)
		g.slots = append(g.slots, m)
		s.at(start, m.join)
	}
	f := &groupFaults{s: s, g: g, start: start, span: s.faultSpan() + int64(4*time.Second), busy: map[int][]window{}}
	g.faultEnd = start
	f.plan(c.Crashes, int64(500*time.Millisecond), int64(6*time.Second), f.crash)
	f.plan(c.Leaves, int64(time.Second), int64(5*time.Second), f.leave)
	f.plan(c.CutOffs, int64(time.Second), int64(c.MaxCut), f.cutOff)
	for _, st := range s.kv.stalls {
		g.faultEnd = max(g.faultEnd, st.to)
	}
	// A few rounds more, so that the last join or return plays out.
	g.faultEnd += 3 * groupInterval
}

// groupFaults places the group's member faults in time: each within
// [start+0.5s, start+0.5s+span), each slot at most one fault at a time
// (1 s apart), one member cut off at a time.
type groupFaults struct {
	s     *sim
	g     *group
	start int64 // the members' first join
	span  int64
	busy  map[int][]window // the faults planned, per slot
	cuts  []window         // the KV cut-offs planned
}

// fits reports whether w keeps 1 s from every fault planned for slot,
// and if so books w for it.
func (f *groupFaults) fits(slot int, w window) bool {
	for _, b := range f.busy[slot] {
		if w.from < b.to+int64(time.Second) && b.from < w.to+int64(time.Second) {
			return false
		}
	}
	f.busy[slot] = append(f.busy[slot], w)
	return true
}

// plan draws count faults of minLen to maxLen on random members (10
// tries each to find a window that fits) and has do schedule each one;
// g.faultEnd grows to the end of the last.
func (f *groupFaults) plan(count int, minLen, maxLen int64, do func(m *member, w window)) {
	s, g := f.s, f.g
	for range count {
		for try := 0; try < 10; try++ {
			m := g.slots[s.rnd.IntN(len(g.slots))]
			at := f.start + int64(500*time.Millisecond) + s.rnd.Int64N(f.span)
			w := window{from: at, to: at + minLen + s.rnd.Int64N(max(maxLen-minLen, 1))}
			if f.fits(m.slot, w) {
				do(m, w)
				g.faultEnd = max(g.faultEnd, w.to)
				break
			}
		}
	}
}

// crash schedules m's crash at w.from and its restart at w.to, under a
// fresh id for half of them.
func (f *groupFaults) crash(m *member, w window) {
	s, g := f.s, f.g
	freshID := s.rnd.IntN(2) == 0
	crashed := false
	s.at(w.from, func() { crashed = m.crash() })
	s.at(w.to, func() {
		if !crashed || m.up {
			return
		}
		if freshID {
			m.id = g.freshID(m.slot)
		}
		m.join()
	})
}

// leave schedules m's graceful leave at w.from and its return under a
// fresh id at w.to (or once the leave is done).
func (f *groupFaults) leave(m *member, w window) {
	s, g := f.s, f.g
	left := false
	s.at(w.from, func() {
		if m.up && !m.leaving && !m.stopped {
			left = true
			m.leaving = true
			m.next()
		}
	})
	var rejoin func()
	rejoin = func() {
		switch {
		case !left:
		case m.up: // still leaving (its releases wait for the KV)
			s.at(s.now+int64(100*time.Millisecond), rejoin)
		default:
			m.id = g.freshID(m.slot)
			m.join()
		}
	}
	s.at(w.to, rejoin)
}

// cutOff cuts m off from the KV during w (hanging or failing its calls,
// half each), unless another member's cut-off overlaps w: no two members
// cut off at once, so that one can take over from the other.
func (f *groupFaults) cutOff(m *member, w window) {
	s := f.s
	for _, o := range f.cuts {
		if w.from < o.to && o.from < w.to {
			return
		}
	}
	f.cuts = append(f.cuts, w)
	kf := kvFault{from: w.from, to: w.to, hang: s.rnd.IntN(2) == 0}
	s.kv.cuts[m.name] = append(s.kv.cuts[m.name], kf)
	s.at(kf.from, func() {
		s.res.KVCutOffs++
		s.log.add("%s (%s) CUT OFF from the KV (%s) until %s", m.name, m.id, hangName(kf.hang), s.log.at(kf.to))
	})
	s.at(kf.to, func() { s.log.add("%s reaches the KV again", m.name) })
}

// freshID is a new member id for slot's process: "m<slot><letter>" and
// a random tag, so that the rendezvous hash ranks the members differently
// from seed to seed.
func (g *group) freshID(slot int) string {
	g.fresh[slot]++
	return sprintf("m%d%c%02x", slot, 'a'+g.fresh[slot]-1, g.s.rnd.IntN(256))
}

// newHolding starts a claim's reader at from.
func (g *group) newHolding(m *member, p int, rev uint64, committed, from core.Position) *holding {
	s := g.s
	g.gens++
	h := &holding{m: m, p: p, gen: g.gens, rev: rev, committed: committed, processed: committed, claimedAt: s.now}
	r := &reader{s: s, id: -1, name: sprintf("%s.p%d#%d", m.id, p, g.gens), skew: m.clk.skew, ppm: m.clk.ppm, start: from,
		r: core.NewReader(s.readerConfig(), from), resumes: []core.Position{from}, started: []int64{s.now},
		suspect: make([]bool, s.cfg.Nodes), open: map[uint64]bool{}, member: h}
	h.r = r
	r.wakeAt(s.now)
	return h
}

// safe caps a position at h's reader's LowWater (unless the commitPastLW
// bug is injected).
func (g *group) safe(h *holding, pos core.Position) core.Position {
	if low := h.r.r.LowWater(); low.Less(pos) && !g.s.cfg.inject.commitPastLW {
		g.capped = true
		g.s.res.CappedCommits++
		return low
	}
	return pos
}

// checkCommit: a position written for h never passes an in-doubt offset
// its reader reported and has not resolved.
func (g *group) checkCommit(h *holding, pos core.Position) {
	low, found := uint64(0), false
	for off := range h.r.open {
		if !found || off < low {
			low, found = off, true
		}
	}
	if found && (core.Position{Offset: low}).Less(pos) {
		g.s.violate("%s commits %s on p%d past %s, which its reader holds in doubt", h.m.id, g.s.log.pos(pos), h.p, g.s.log.off(low))
	}
}

// active returns the other member that holds h's partition, is up and
// is not paused, if any.
func (g *group) active(h *holding) (*member, *holding) {
	for _, o := range g.slots {
		if o == h.m || !o.up {
			continue
		}
		if oh := o.parts[h.p]; oh != nil && !oh.stopped && !o.pausedNow() {
			return o, oh
		}
	}
	return nil, nil
}

// checkClaim: a claim never starts reading while another member holds
// the partition, live and not paused (revoke before assign).
func (g *group) checkClaim(h *holding) {
	s := g.s
	if o, oh := g.active(h); o != nil {
		g.overlaps[sprintf("%d/%d", h.gen, oh.gen)] = true
		s.violate("group: %s claims p%d while %s holds it since %s, live and not paused (last heartbeat %v ago on its clock)",
			h.m.id, h.p, o.id, s.log.at(oh.claimedAt), time.Duration(o.mono()-o.lastBeat).Round(time.Millisecond))
	}
}

// emit delivers one record to h's member's application, and checks that
// no other member is delivering the partition meanwhile.
func (g *group) emit(h *holding, d core.Delivery) {
	s := g.s
	m := h.m
	g.got = append(g.got, gdelivery{value: string(d.Record.Value), id: d.Stripe, pos: d.Pos, at: s.now, member: m.id, gen: h.gen, late: d.Late})
	if next := (core.Position{Offset: d.Pos.Offset, Index: d.Pos.Index + 1}); h.processed.Less(next) {
		h.processed = next // late deliveries (lower positions) never move it back
	}
	if o, oh := g.active(h); o != nil && !g.overlaps[sprintf("%d/%d", h.gen, oh.gen)] {
		g.overlaps[sprintf("%d/%d", h.gen, oh.gen)] = true
		s.violate("group: %s delivers p%d (%s) while %s holds it since %s, live and not paused (last heartbeat %v ago on its clock)",
			m.id, h.p, s.log.pos(d.Pos), o.id, s.log.at(oh.claimedAt), time.Duration(o.mono()-o.lastBeat).Round(time.Millisecond))
	}
}

// settle ends the group once the writes and every planned fault are over
// and the record's owner holds the partition, delivering, past the end
// of the writes with nothing in doubt (but offsets a wipe left in doubt
// for good).
func (g *group) settle() {
	s := g.s
	if g.done || s.prodsLeft > 0 || s.now < g.faultEnd {
		return
	}
	e, ok := s.kv.data[posPrefix+"0"]
	if !ok {
		return
	}
	owner := e.val.(posRec).owner
	holders := 0
	var ready *holding
	for _, m := range g.slots {
		if !m.up {
			continue
		}
		h := m.parts[0]
		if h == nil || h.stopped {
			continue
		}
		holders++
		if m.id == owner && !m.paused && len(h.pending) == 0 && h.r.r.Pos().Offset > s.end && h.r.r.Deferred() == s.wipeStuck(h.r) {
			ready = h
		}
	}
	if ready == nil || holders != 1 {
		return
	}
	g.done = true
	s.log.add("group done: %s holds p0 at %s", owner, s.log.pos(ready.r.r.Pos()))
	for _, m := range g.slots {
		for _, h := range m.parts {
			h.stop()
		}
		m.up = false
		m.epoch++
	}
}

// checkGroup runs the end-of-run group checks (revoke before assign and
// the commit cap are checked as they happen).
func (s *sim) checkGroup() {
	g := s.group
	if g == nil {
		return
	}
	got := map[string][]gdelivery{}
	for _, d := range g.got {
		got[d.value] = append(got[d.value], d)
	}
	s.res.GroupDelivered = len(got)
	var committed core.Position
	if e, ok := s.kv.data[posPrefix+"0"]; ok {
		committed = e.val.(posRec).pos
	}
	for _, id := range sortedIDs(s.truth.acked) {
		off := s.truth.acked[id]
		if s.wipeLost(id) {
			// Unreadable for good: the group must hold its position there.
			if vs := s.truth.values[id]; len(vs) > 0 && len(got[vs[0]]) == 0 && (core.Position{Offset: off}).Less(committed) {
				s.violate("group: committed %s past %s (acked at %s), which a wipe left unreadable and no member delivered",
					s.log.pos(committed), sid(id), s.log.off(off))
			}
			continue
		}
		for _, v := range s.truth.values[id] {
			if len(got[v]) == 0 {
				s.violate("group: no member delivered %q of %s, acked at %s (durable on n%s)", v, sid(id), s.log.off(off),
					nodeList(s.holders(id, off)))
				break
			}
		}
	}
	c := s.cfg.Group
	clean := c.Crashes == 0 && c.CutOffs == 0 && s.cfg.KV == (KVConfig{})
	dups := 0
	for _, v := range sortedValues(got) {
		ds := got[v]
		if id, ok := s.truth.byValue[v]; !ok || id != ds[0].id {
			s.violate("group: %s delivered %q (stripe %s) that was never sent", ds[0].member, v, sid(ds[0].id))
		}
		for _, d := range ds[1:] {
			dups++
			if clean && !g.capped && d.pos == ds[0].pos {
				s.violate("group: %q delivered twice at %s (by %s, then %s) without a member or KV fault", v, s.log.pos(d.pos), ds[0].member, d.member)
			}
		}
	}
	s.res.GroupDups = dups
	handovers, last := 0, 0
	for _, d := range g.got {
		if last != 0 && d.gen != last {
			handovers++
		}
		last = d.gen
	}
	s.res.Handovers = handovers
}

func sortedValues(m map[string][]gdelivery) []string {
	out := make([]string, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
