package sim

import (
	"slices"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// The consumer group's world and checks (group.go has the members). The
// members are the shipped code, so the checks see only what is
// observable from outside it: deliveries at the application, the
// position records' writes in the KV (each names the member that wrote
// it, and the port knows which process sent it), the readers it ran and
// its log.
//
// Checks:
//   - at-least-once: every acked record is delivered by some member's
//     application (the union of the members' deliveries); one a wipe
//     left unreadable (wipe.go) holds the group's position at it;
//   - one reader at a time (revoke before assign), now in its strongest
//     observable form: every delivery happens while the partition's
//     position record, as last written in the KV, was written by the
//     delivering process itself, and never after that process sent a
//     release of the partition (until it claims it again). The copy's
//     check ("no delivery or claim while another member holds the
//     partition, up and not paused") read the member's internal state,
//     which the shipped member does not show; this one implies it for
//     deliveries (another member's claim is a write of its own) and also
//     catches a message handed over after its partition's release;
//   - commits never pass an in-doubt offset the committing reader has not
//     resolved (by the reader's reports, not its LowWater): checked on
//     every write that moves the position, against the process's last
//     reader of the partition;
//   - without member or KV faults (joins and leaves allowed), no record is
//     delivered twice at the same position, unless a commit or release
//     was held back at an in-doubt offset (the successor re-reads from
//     there);
//   - the group finishes: after the writes and every planned fault, the
//     record's owner holds the partition, delivering, caught up with the
//     end of the writes for a second (stuck reports it otherwise).

// group is the consumer group of a run.
type group struct {
	s          *sim
	slots      []*member
	incs       []*minc // every process that ran
	catalog    *meta.StaticCatalog
	done       bool
	faultEnd   int64 // three rounds after the last planned group or KV fault event
	gens       int
	got        []gdelivery
	capped     bool        // some release or commit was held back at LowWater
	fresh      map[int]int // fresh ids drawn per slot
	readySince int64       // since when the group looked done (0: it does not)
	// writer is, per partition, the process whose write the position
	// record holds now (nil: released or never written), and since when.
	writer   map[int]*minc
	writerAt map[int]int64
	reported map[string]bool // violations reported once per process pair
	lastGot  map[*minc]int64 // when each process's application last took a message
}

// gdelivery is one record a member's application took.
type gdelivery struct {
	value  string
	id     stripe.ID
	pos    core.Position
	p      int
	at     int64
	member string
	tag    string
	late   bool
}

// scheduleGroup creates the member processes, the topic they read and
// their faults: crashes (back after 0.5-6 s, half of them under a fresh
// id), leaves (back after 1-5 s under a fresh id) and KV cut-offs, each
// slot at most one fault at a time, and one member cut off at a time.
func (s *sim) scheduleGroup() {
	c := s.cfg.Group
	g := &group{s: s, fresh: map[int]int{}, catalog: meta.NewStaticCatalog(), writer: map[int]*minc{},
		writerAt: map[int]int64{}, reported: map[string]bool{}, lastGot: map[*minc]int64{}}
	s.group = g
	ens := make([]string, 0, s.params.N)
	for i := range s.params.N {
		ens = append(ens, sprintf("n%d", i))
	}
	t := &meta.Topic{Name: groupTopic, Partitions: 1, Params: s.params, Ensembles: [][]string{ens}, Created: uint64(epoch0)}
	if err := g.catalog.Put(t); err != nil {
		panic(sprintf("sim: group topic: %v", err))
	}
	start := s.now + writeStart/2
	for i := range c.Members {
		m := &member{g: g, s: s, slot: i, name: sprintf("s%d", i), skew: s.skew(c.Skew), parts: map[int]*holding{}}
		s.ppmDraw(c.Drift) // drawn as before, so the seed's other draws stay
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
	g.faultEnd += 3 * int64(time.Second)
	s.at(start+groupTick, g.tick)
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
	s.at(w.from, func() { crashed = !m.leaving && m.crash() })
	s.at(w.to, func() {
		if !crashed || m.inc != nil {
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
	s.at(w.from, func() { left = m.leave() })
	var rejoin func()
	rejoin = func() {
		switch {
		case !left:
		case m.inc != nil: // still leaving (its releases wait for the KV)
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

// issued sees a write of p's position record as process in sends it:
// a commit or release moving the position must not pass an offset the
// process's last reader of p holds in doubt; one below what that reader
// delivered was held back at its LowWater.
func (g *group) issued(in *minc, p int, pos meta.GroupPosition) {
	s := g.s
	if pos.Member == "" {
		in.released[p] = true
	} else {
		delete(in.released, p)
	}
	next := core.Position{Offset: pos.Offset, Index: pos.Index}
	cur := core.Position{}
	if e, ok := s.kv.data[posKey(p)]; ok {
		gp := e.val.(meta.GroupPosition)
		cur = core.Position{Offset: gp.Offset, Index: gp.Index}
	}
	h := in.last[p]
	if h == nil || !cur.Less(next) {
		return // a claim, a reassert, an orphan's release: the position stays
	}
	if next.Less(h.maxNext) && !h.r.r.LowWater().Less(next) {
		g.capped = true
		s.res.CappedCommits++
	}
	low, found := uint64(0), false
	for off := range h.r.open {
		if !found || off < low {
			low, found = off, true
		}
	}
	if found && (core.Position{Offset: low}).Less(next) {
		s.violate("group: %s commits %s on p%d past %s, which its reader %s holds in doubt", in.tag, s.log.pos(next), p, s.log.off(low), h.r.name)
	}
}

// applied sees a write of p's position record applied in the KV. A
// claim (a write naming the process after another's) must find no other
// process reading p (a reader open through its ports) and not paused (by
// its log).
func (g *group) applied(in *minc, p int, pos meta.GroupPosition) {
	s := g.s
	if pos.Member != "" && g.writer[p] != in {
		for _, m := range g.slots {
			o := m.inc
			if o == nil || o == in || m.paused || m.parts[p] == nil || g.reported[o.tag+"/claimed"] {
				continue
			}
			g.reported[o.tag+"/claimed"] = true
			s.violate("group: %s claims p%d while %s reads it (%s), not paused", in.tag, p, o.tag, m.parts[p].r.name)
		}
	}
	if pos.Member == "" {
		g.writer[p] = nil
	} else {
		g.writer[p] = in
	}
	g.writerAt[p] = g.s.now
}

// deliver records one message a process's application took, and checks
// that the position record holds that process's write and that the
// process has not released the partition since.
func (g *group) deliver(in *minc, d gdelivery) {
	s := g.s
	if in.isDead() || g.done {
		return
	}
	d.tag = in.tag
	g.got = append(g.got, d)
	g.lastGot[in] = s.now
	w := g.writer[d.p]
	switch {
	case in.released[d.p] && !g.reported[in.tag+"/released"]:
		g.reported[in.tag+"/released"] = true
		s.violate("group: %s delivers p%d (%s) after it sent the partition's release", in.tag, d.p, s.log.pos(d.pos))
	case w != in && !g.reported[in.tag+"/writer"]:
		g.reported[in.tag+"/writer"] = true
		by := "no member (released)"
		if w != nil {
			by = w.tag
		}
		s.violate("group: %s delivers p%d (%s) while the position record holds the write of %s since %s", in.tag, d.p,
			s.log.pos(d.pos), by, s.log.at(g.writerAt[d.p]))
	}
}

// noted reads a process's log line: pauses, claims, releases, fencing.
func (g *group) noted(in *minc, msg string) {
	s, m := g.s, in.m
	switch msg {
	case "consumer group: no heartbeat for most of the session; delivery paused until one succeeds":
		s.res.Pauses++
		if m.inc == in {
			m.paused = true
		}
	case "consumer group: heartbeat succeeded; delivery resumed":
		if m.inc != in {
			break
		}
		m.paused = false
		// Resuming, it must read only partitions whose record holds its own write.
		for _, p := range sortedKeys(m.parts) {
			if g.writer[p] != in && !g.reported[in.tag+"/resumed"] {
				g.reported[in.tag+"/resumed"] = true
				s.violate("group: %s resumes delivery reading p%d while the position record holds another's write (since %s)",
					in.tag, p, s.log.at(g.writerAt[p]))
			}
		}
	case "consumer group: partition claimed":
		s.res.Claims++
	case "consumer group: partition released to another member":
		s.res.Releases++
	case "consumer group: released a record naming this member that it did not hold":
		s.res.Orphans++
	}
}

// tick looks every groupTick whether the group is done.
func (g *group) tick() {
	if g.done {
		return
	}
	g.settle()
	if !g.done {
		g.s.at(g.s.now+groupTick, g.tick)
	}
}

// settle ends the group once the writes and every planned fault are over
// and, for a second, the record's owner holds the partition, delivering,
// past the end of the writes with nothing in doubt (but offsets a wipe
// left in doubt for good), and nobody else reads it.
func (g *group) settle() {
	s := g.s
	if g.done || s.prodsLeft > 0 || s.now < g.faultEnd {
		return
	}
	ready := g.ready()
	if ready == nil {
		g.readySince = 0
		return
	}
	if g.readySince == 0 {
		g.readySince = s.now
	}
	if s.now-g.readySince < int64(time.Second) || s.now-g.lastGot[ready.in] < int64(time.Second) {
		return // the application may still be taking what the reader handed over
	}
	g.done = true
	s.log.add("group done: %s holds p0 at %s", ready.in.tag, s.log.pos(ready.r.r.Pos()))
	for _, m := range g.slots {
		if in := m.inc; in != nil {
			in.die()
			m.down(in)
			s.bubble.wg.Go(in.kill)
		}
	}
}

// ready is the owner's reader if the group looks done now.
func (g *group) ready() *holding {
	s := g.s
	e, ok := s.kv.data[posKey(0)]
	if !ok {
		return nil
	}
	owner := e.val.(meta.GroupPosition).Member
	holders := 0
	var ready *holding
	for _, m := range g.slots {
		h := m.parts[0]
		if m.inc == nil || h == nil || h.stopped {
			continue
		}
		holders++
		if m.id == owner && !m.paused && len(h.pending) == 0 && h.r.r.Pos().Offset > s.end && h.r.r.Deferred() == s.wipeStuck(h.r) {
			ready = h
		}
	}
	if holders != 1 {
		return nil
	}
	return ready
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
	if e, ok := s.kv.data[posKey(0)]; ok {
		gp := e.val.(meta.GroupPosition)
		committed = core.Position{Offset: gp.Offset, Index: gp.Index}
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
			s.violate("group: %s delivered %q (stripe %s) that was never sent", ds[0].tag, v, sid(ds[0].id))
		}
		for _, d := range ds[1:] {
			dups++
			if clean && !g.capped && d.pos == ds[0].pos {
				s.violate("group: %q delivered twice at %s (by %s, then %s) without a member or KV fault", v, s.log.pos(d.pos), ds[0].tag, d.tag)
			}
		}
	}
	s.res.GroupDups = dups
	handovers, last := 0, ""
	for _, d := range g.got {
		if last != "" && d.tag != last {
			handovers++
		}
		last = d.tag
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
