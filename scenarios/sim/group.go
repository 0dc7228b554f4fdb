package sim

import (
	"slices"
	"sort"
	"time"

	"github.com/raidq/raidq/actors/core"
)

// A consumer group (the root package's groups.go and group_commit.go),
// simulated: GroupConfig.Members member processes read the partition
// through the KV, each on its own clock (skewed, drifting). One member
// process is one sequential loop, as groupState.run is: it joins with a
// heartbeat, then runs a round at once and every GroupInterval, and an
// AutoCommit pass every AutoCommit, one at a time (Go tickers: a tick that
// comes while the loop is busy waits, further ones are dropped). A round:
//
//  1. heartbeat: Put its member record (2 s timeout); lastBeat is when a
//     Put returned OK;
//  2. pause if no heartbeat succeeded for core.PauseAfter(session);
//  3. list the member records (a 3 s deadline for this and the rest of
//     the round); failed: core.Liveness.Failed, and the round ends;
//     listed: Liveness.Observe on the member's own clock;
//  4. list the position records; failed: the round ends;
//  5. core.PlanGroup and carry it out: drop Fenced partitions (stop the
//     reader, commit nothing); Release the others' (stop the reader,
//     commit the processed position capped at the reader's LowWater and
//     release the record, one CAS); retry unfinished releases; Claim the
//     free ones (CAS the record to this member, start a core.Reader at
//     the committed position);
//  6. if the heartbeat succeeded: unpause.
//
// AutoCommit writes each held partition's processed position, capped at
// its reader's LowWater, with a CAS (fenced: the partition is dropped).
// The application is instant: a record is processed when it is
// delivered. While paused, a reader's deliveries wait (the sink blocks
// at the gate, and the reader scans no further); given up, they are
// dropped. Crashes lose everything but the KV; a crashed member restarts
// with its id or a fresh one. A graceful leave (Consumer.Close) lets the
// round in progress finish, stops the readers, releases each partition
// with its processed position and deletes the member record; the process
// rejoins later under a fresh id.
//
// Three behaviours of groups.go break the checks (GroupGaps): the pause
// is checked only at rounds; a record left naming the member after a
// write whose reply was lost is never released; a held partition whose
// record another member claimed and released meanwhile stays held. The
// simulated member does without them by default (a timer pauses it
// PauseAfter after its last heartbeat that returned OK, it releases
// orphan records, and it drops a holding whose record's revision moved);
// GroupConfig.Gaps re-creates them.
//
// There is one partition, so the group's assignment moves it whole; the
// checks are in group_check.go.

const (
	groupInterval = int64(time.Second)           // raidq.GroupInterval
	memberPoll    = 25 * int64(time.Millisecond) // actors.DefaultReaderPoll
	groupTopic    = "sim"
	groupName     = "g"
	memberPrefix  = "g.sim.m."
	posPrefix     = "g.sim.p."
)

// memberRec is a member's heartbeat record (meta.GroupMember).
type memberRec struct {
	heartbeat int64 // the member's clock
	session   int64
}

// posRec is a partition's position record (meta.GroupPosition): the next
// position to read and its owner ("" released).
type posRec struct {
	pos   core.Position
	owner string
}

// member is one member process (a slot: its id changes when it restarts
// under a fresh one).
type member struct {
	g    *group
	s    *sim
	slot int
	name string // the process, for KV cut-offs and the log: "s0"
	id   string // the member id: "m0a3f", then "m0b1c" after a restart under a fresh id, ...
	clk  actorClock

	up       bool
	epoch    int // bumped by crashes and leaves: stale continuations do nothing
	leaving  bool
	stopped  bool // leaving: no more claims
	live     *core.Liveness
	beats    map[string]memberRec // last listing (the beatClock bug judges by it)
	lastBeat int64                // member clock at the last heartbeat that returned OK
	paused   bool

	busy                  bool // a round or commit pass is under way
	roundDue, commitDue   bool // a tick came while busy
	roundTick, commitTick int64

	parts    map[int]*holding
	releases map[int]*holding
}

// holding is one claim of a partition: its reader and the record's state.
type holding struct {
	m         *member
	p         int
	gen       int // numbers the group's holdings
	rev       uint64
	committed core.Position
	processed core.Position
	r         *reader
	pending   []core.Delivery // waiting while paused
	stopped   bool
	claimedAt int64
}

func (m *member) mono() int64 { return m.clk.at(m.s.now) }

// guard wraps a continuation so it does nothing after a crash or leave.
func (m *member) guard(fn func()) func() {
	epoch := m.epoch
	return func() {
		if m.epoch == epoch && m.up {
			fn()
		}
	}
}

// call is a KV call with a timeout of d on the member's clock.
func (m *member) call(op kvOp, d int64, fn func(kvReply)) {
	m.callBy(op, m.s.now+m.clk.span(d), fn)
}

// callBy is a KV call with a deadline in true time (a context shared by
// several calls).
func (m *member) callBy(op kvOp, deadline int64, fn func(kvReply)) {
	epoch := m.epoch
	m.s.kv.call(m.name, op, deadline-m.s.now, func(rep kvReply) {
		if m.epoch == epoch && m.up {
			fn(rep)
		}
	})
}

// join starts the member process: the joining heartbeat (3 s), then the
// loop.
func (m *member) join() {
	s := m.s
	m.up, m.leaving, m.stopped, m.paused, m.busy = true, false, false, false, true
	m.roundDue, m.commitDue = false, false
	m.epoch++
	m.live = core.NewLiveness(m.mono())
	m.beats = nil
	m.parts, m.releases = map[int]*holding{}, map[int]*holding{}
	s.log.add("%s JOINS as %s (clock %s, session %v)", m.name, m.id, m.clk, s.cfg.Group.Session)
	m.call(m.heartbeat(), 3*groupInterval, func(rep kvReply) {
		m.lastBeat = m.mono() // a session starts at the join either way
		m.armPause()
		m.roundTick = s.now + m.clk.span(groupInterval)
		s.at(m.roundTick, m.guard(m.tickRound))
		if c := int64(s.cfg.Group.AutoCommit); c > 0 {
			m.commitTick = s.now + m.clk.span(c)
			s.at(m.commitTick, m.guard(m.tickCommit))
		}
		m.round()
	})
}

func (m *member) heartbeat() kvOp {
	return kvOp{kind: kvPut, key: memberPrefix + m.id, val: memberRec{heartbeat: m.mono(), session: int64(m.s.cfg.Group.Session)}}
}

func (m *member) tickRound() {
	m.roundTick += m.clk.span(groupInterval)
	m.s.at(m.roundTick, m.guard(m.tickRound))
	m.roundDue = true
	m.next()
}

func (m *member) tickCommit() {
	m.commitTick += m.clk.span(int64(m.s.cfg.Group.AutoCommit))
	m.s.at(m.commitTick, m.guard(m.tickCommit))
	m.commitDue = true
	m.next()
}

// next starts what is due once the loop is free (both due: either, as
// Go's select picks).
func (m *member) next() {
	if m.busy {
		return
	}
	if m.leaving {
		m.leave()
		return
	}
	switch {
	case m.roundDue && (!m.commitDue || m.s.rnd.IntN(2) == 0):
		m.roundDue = false
		m.busy = true
		m.round()
	case m.commitDue:
		m.commitDue = false
		m.busy = true
		m.commitAll()
	}
}

// opDone ends a round or commit pass.
func (m *member) opDone() {
	m.busy = false
	m.g.settle()
	m.next()
}

// pauseAfter is PauseAfter(session) on the member's clock.
func (m *member) pauseAfter() int64 { return core.PauseAfter(int64(m.s.cfg.Group.Session)) }

// round is one groupState.round.
func (m *member) round() {
	s := m.s
	m.busy = true
	sent := m.mono()
	m.call(m.heartbeat(), 2*groupInterval, func(rep kvReply) {
		beat := rep.err == nil
		if beat {
			m.lastBeat = sent // the others may have seen it from when it was sent
			m.armPause()
		}
		if m.mono()-m.lastBeat > m.pauseAfter() {
			m.pause()
		}
		deadline := s.now + m.clk.span(3*groupInterval)
		m.callBy(kvOp{kind: kvList, key: memberPrefix}, deadline, func(rep kvReply) {
			if rep.err != nil {
				m.live.Failed(m.mono())
				m.opDone()
				return
			}
			obs := map[string]core.MemberBeat{}
			m.beats = map[string]memberRec{}
			for k, e := range rep.list {
				rec := e.val.(memberRec)
				obs[k[len(memberPrefix):]] = core.MemberBeat{Revision: e.rev, Session: rec.session}
				m.beats[k[len(memberPrefix):]] = rec
			}
			m.live.Observe(m.mono(), obs)
			m.callBy(kvOp{kind: kvList, key: posPrefix}, deadline, func(rep kvReply) {
				if rep.err != nil {
					m.opDone()
					return
				}
				m.apply(deadline, rep.list, func() {
					if !beat {
						m.opDone()
						return
					}
					m.reassert(deadline, func() {
						m.unpause()
						m.opDone()
					})
				})
			})
		})
	})
}

// liveNow is the member's view of who is alive (with the beatClock bug,
// judged by the heartbeat times the members wrote, on this clock).
func (m *member) liveNow() []string {
	if !m.s.cfg.inject.beatClock {
		return m.live.Live(m.mono())
	}
	var out []string
	for id, b := range m.beats {
		if m.mono()-b.heartbeat < b.session {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// commitAll is one AutoCommit pass over the held partitions.
func (m *member) commitAll() {
	deadline := m.s.now + m.clk.span(2*groupInterval)
	var steps []func(next func())
	stop := false
	for _, p := range sortedKeys(m.parts) {
		h := m.parts[p]
		steps = append(steps, func(next func()) {
			if stop {
				next()
				return
			}
			m.commit(h, h.processed, deadline, func(err error) {
				if err != nil && err != errKVFenced {
					stop = true
				}
				next()
			})
		})
	}
	m.steps(steps, m.opDone)
}

// commit writes next as h's position unless it would not move forward,
// capped at the reader's LowWater; fenced, h is dropped.
func (m *member) commit(h *holding, next core.Position, deadline int64, done func(error)) {
	s := m.s
	next = m.g.safe(h, next)
	if !h.committed.Less(next) {
		done(nil)
		return
	}
	m.g.checkCommit(h, next)
	m.callBy(kvOp{kind: kvUpdate, key: posPrefix + "0", val: posRec{pos: next, owner: m.id}, rev: h.rev}, deadline, func(rep kvReply) {
		switch {
		case rep.err == nil:
			h.rev, h.committed = rep.rev, next
		case rep.err == errKVFenced:
			s.res.Fenced++
			s.log.add("%s commit on p%d FENCED: stops reading", m.id, h.p)
			m.drop(h)
		}
		done(rep.err)
	})
}

// armPause sets the pause timer: PauseAfter after this heartbeat, unless
// another succeeds first (the contract of core.PauseAfter; GapRoundPause
// checks only at rounds instead).
func (m *member) armPause() {
	if m.s.cfg.Group.Gaps&GapRoundPause != 0 {
		return
	}
	beat := m.lastBeat
	m.s.at(m.clk.when(beat+m.pauseAfter())+1, m.guard(func() {
		if m.lastBeat == beat {
			m.pause()
		}
	}))
}

// pausedNow reports whether the member delivers nothing now (pausing
// first if it is past PauseAfter, unless it checks only at rounds).
func (m *member) pausedNow() bool {
	if !m.paused && m.s.cfg.Group.Gaps&GapRoundPause == 0 && m.mono()-m.lastBeat > m.pauseAfter() {
		m.pause()
	}
	return m.paused
}

func (m *member) pause() {
	if m.paused {
		return
	}
	m.paused = true
	m.s.res.Pauses++
	m.s.log.add("%s PAUSES: no heartbeat for %v", m.id, time.Duration(m.mono()-m.lastBeat).Round(time.Millisecond))
}

// unpause resumes delivery: the waiting deliveries go out, the readers
// scan on.
// reassert, for a paused member whose heartbeat just succeeded, rewrites
// every held record as its own before delivery resumes (groups.go does the
// same): another member may have judged it dead from a listing taken
// before that heartbeat and be claiming now; whichever compare-and-set
// lands first wins, and a lost one drops the partition here.
func (m *member) reassert(deadline int64, done func()) {
	if !m.paused || m.s.cfg.Group.Gaps&GapResumeBlind != 0 {
		done()
		return
	}
	var steps []func(next func())
	for _, p := range sortedKeys(m.parts) {
		h := m.parts[p]
		steps = append(steps, func(next func()) {
			op := kvOp{kind: kvUpdate, key: posPrefix + "0", val: posRec{pos: h.committed, owner: m.id}, rev: h.rev}
			m.callBy(op, deadline, func(rep kvReply) {
				switch {
				case rep.err == nil:
					h.rev = rep.rev
				case rep.err == errKVFenced:
					m.s.res.Fenced++
					m.s.log.add("%s lost p%d while paused: stops reading", m.id, p)
					m.drop(h)
				default:
					// unknown: stay paused for this round (next round retries)
					m.s.log.add("%s could not reassert p%d: %v", m.id, p, rep.err)
				}
				next()
			})
		})
	}
	m.steps(steps, done)
}

func (m *member) unpause() {
	if !m.paused {
		return
	}
	m.paused = false
	m.s.log.add("%s resumes delivery", m.id)
	for _, p := range sortedKeys(m.parts) {
		h := m.parts[p]
		ds := h.pending
		h.pending = nil
		for i, d := range ds {
			if m.pausedNow() {
				h.pending = append(h.pending, ds[i:]...)
				break
			}
			m.g.emit(h, d)
		}
		h.r.wakeAt(m.s.now)
	}
}

// crash kills the member process (false if it was not running): nothing
// is released, the records stay.
func (m *member) crash() bool {
	s := m.s
	if !m.up {
		return false
	}
	for _, h := range m.parts {
		h.stop()
	}
	for _, h := range m.releases {
		h.stop()
	}
	m.up = false
	m.epoch++
	s.res.MemberCrashes++
	s.log.add("%s (%s) CRASHES", m.name, m.id)
	return true
}

// leave is Consumer.Close: once the loop is free, stop reading, release
// every partition at its processed position (5 s) and delete the member
// record.
func (m *member) leave() {
	s := m.s
	m.leaving, m.stopped, m.busy = false, true, true
	var hs []*holding
	for _, p := range sortedKeys(m.parts) {
		hs = append(hs, m.parts[p])
	}
	for _, p := range sortedKeys(m.releases) {
		hs = append(hs, m.releases[p])
	}
	for _, h := range hs {
		h.stop()
	}
	s.log.add("%s LEAVES the group", m.id)
	deadline := s.now + m.clk.span(5*int64(time.Second))
	var steps []func(next func())
	for _, h := range hs {
		steps = append(steps, func(next func()) { m.finishRelease(h, deadline, next) })
	}
	m.steps(steps, func() {
		m.callBy(kvOp{kind: kvDelete, key: memberPrefix + m.id}, deadline, func(kvReply) {
			m.up = false
			m.epoch++
			s.log.add("%s has left", m.id)
			m.g.settle()
		})
	})
}

// reading reports whether the holding's reader may scan on: not given up,
// and no delivery waiting for the pause to end.
func (h *holding) reading() bool { return !h.stopped && len(h.pending) == 0 }

// stop ends the holding's reader; waiting deliveries are dropped.
func (h *holding) stop() {
	h.stopped = true
	h.pending = nil
	h.r.cur = nil
	h.r.wake++
}

// took hands a reader's output to the member: deliveries go out unless
// the member is paused.
func (h *holding) took(out core.Output) {
	s := h.m.s
	for _, d := range out.InDoubt {
		s.log.add("%s IN-DOUBT %s %s seen=%d unheard=%s", h.r.name, sid(d.Stripe), s.log.off(d.Offset), d.Seen, nodeList(d.Unheard))
	}
	for i, d := range out.Deliveries {
		if len(h.pending) > 0 || h.m.pausedNow() {
			h.pending = append(h.pending, out.Deliveries[i:]...)
			break
		}
		h.m.g.emit(h, d)
	}
}

func maxPos(a, b core.Position) core.Position {
	if a.Less(b) {
		return b
	}
	return a
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
