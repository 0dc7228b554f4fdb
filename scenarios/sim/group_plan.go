package sim

import (
	"github.com/raidq/raidq/actors/core"
)

// How a group member carries out core.PlanGroup in a round (group.go has
// the round), as groups.go does: drop the Fenced partitions (a record
// naming another member, or rewritten by another since this member's last
// write), Release the others', finish the releases left from earlier
// rounds, Claim the free ones, release Orphans (records naming this member
// that it neither holds nor is assigned), one KV call at a time under the
// round's deadline. GroupGaps re-create what groups.go did before the
// simulation found it.

// apply carries out core.PlanGroup for this round, one KV call at a time.
func (m *member) apply(deadline int64, list map[string]kvEntry, done func()) {
	s := m.s
	if m.stopped {
		done()
		return
	}
	owners := map[int]kvEntry{}
	v := core.GroupView{Group: groupName, Topic: groupTopic, Partitions: 1, Me: m.id, Live: m.liveNow(),
		Owners: map[int]string{}, Held: map[int]bool{}, Revs: map[int]uint64{}, HeldRevs: map[int]uint64{},
		Releasing: map[int]bool{}}
	for k, e := range list {
		p := 0 // one partition: posPrefix + "0"
		if k != posPrefix+"0" {
			continue
		}
		owners[p] = e
		v.Owners[p], v.Revs[p] = e.val.(posRec).owner, e.rev
	}
	for p, h := range m.parts {
		v.Held[p] = true
		if e, ok := owners[p]; ok && e.rev > h.rev && e.val.(posRec).owner == m.id {
			h.rev = e.rev // a write of this member whose answer was lost
		}
		v.HeldRevs[p] = h.rev
	}
	if s.cfg.Group.Gaps&GapStaleHold != 0 {
		v.HeldRevs = nil // fenced only on another owner's name
	}
	var pending []*holding
	for _, p := range sortedKeys(m.releases) {
		pending = append(pending, m.releases[p])
		v.Releasing[p] = true
	}
	plan := core.PlanGroup(v)
	if s.cfg.inject.claimEarly {
		plan.Claim = append(plan.Claim, plan.Wait...)
	}
	if s.cfg.Group.Gaps&GapKeepOrphans != 0 {
		plan.Orphans = nil
	}
	if len(plan.Claim)+len(plan.Release)+len(plan.Fenced)+len(plan.Wait)+len(plan.Orphans) > 0 {
		s.log.add("%s plan: live=%v owners=%v held=%v -> claim=%v release=%v fenced=%v wait=%v orphans=%v", m.id, v.Live, v.Owners,
			sortedKeys(m.parts), plan.Claim, plan.Release, plan.Fenced, plan.Wait, plan.Orphans)
	}
	for _, p := range plan.Fenced {
		if h := m.parts[p]; h != nil {
			s.res.Fenced++
			s.log.add("%s FENCED on p%d (owner %q, rev %d, ours %d): stops reading", m.id, p, v.Owners[p], v.Revs[p], h.rev)
			m.drop(h)
		}
	}
	var steps []func(next func())
	for _, p := range plan.Release {
		if h := m.parts[p]; h != nil {
			steps = append(steps, func(next func()) { m.release(h, deadline, next) })
		}
	}
	for _, h := range pending {
		steps = append(steps, func(next func()) { m.finishRelease(h, deadline, next) })
	}
	for _, p := range plan.Claim {
		e := owners[p]
		steps = append(steps, func(next func()) { m.claim(p, e, deadline, next) })
	}
	for _, p := range plan.Orphans {
		e := owners[p]
		steps = append(steps, func(next func()) { m.releaseOrphan(p, e, deadline, next) })
	}
	m.steps(steps, done)
}

// releaseOrphan releases an orphan record at revision e.rev, keeping its
// position.
func (m *member) releaseOrphan(p int, e kvEntry, deadline int64, next func()) {
	s := m.s
	rec := e.val.(posRec)
	m.callBy(kvOp{kind: kvUpdate, key: posPrefix + "0", val: posRec{pos: rec.pos}, rev: e.rev}, deadline, func(rep kvReply) {
		s.res.Orphans++
		s.log.add("%s RELEASES ORPHAN p%d at %s (rev %d): err %v", m.id, p, s.log.pos(rec.pos), e.rev, rep.err)
		next()
	})
}

// steps runs async steps one after the other, then done.
func (m *member) steps(steps []func(next func()), done func()) {
	if len(steps) == 0 {
		done()
		return
	}
	steps[0](m.guard(func() { m.steps(steps[1:], done) }))
}

// claim takes partition p: the record rewritten as this member's, then a
// reader from its position.
func (m *member) claim(p int, e kvEntry, deadline int64, next func()) {
	s := m.s
	var rec posRec
	if e.rev != 0 {
		rec = e.val.(posRec)
	}
	op := kvOp{kind: kvUpdate, key: posPrefix + "0", val: posRec{pos: rec.pos, owner: m.id}, rev: e.rev}
	if e.rev == 0 {
		op.kind = kvCreate
	}
	m.callBy(op, deadline, func(rep kvReply) {
		if rep.err != nil {
			s.log.add("%s claim of p%d failed: %v", m.id, p, rep.err)
			next()
			return
		}
		from := rec.pos
		if from.Offset == 0 {
			from = core.Position{Offset: s.readerStart()} // ConsumerOptions.From
		}
		h := m.g.newHolding(m, p, rep.rev, rec.pos, from)
		if m.stopped {
			h.stop()
			next()
			return
		}
		s.res.Claims++
		s.log.add("%s CLAIMS p%d (rev %d) from %s, previous owner %q", m.id, p, rep.rev, s.log.pos(from), rec.owner)
		m.g.checkClaim(h)
		m.parts[p] = h
		delete(m.releases, p)
		next()
	})
}

// release gives h up: stop reading (the application is instant: nothing
// in hand), then commit and release.
func (m *member) release(h *holding, deadline int64, next func()) {
	delete(m.parts, h.p)
	m.releases[h.p] = h
	h.stop()
	m.finishRelease(h, deadline, next)
}

// finishRelease writes h's final position with no owner; a failed write
// is retried next round (the partition stays unread meanwhile).
func (m *member) finishRelease(h *holding, deadline int64, next func()) {
	s := m.s
	pos := maxPos(h.committed, m.g.safe(h, h.processed))
	m.g.checkCommit(h, pos)
	m.callBy(kvOp{kind: kvUpdate, key: posPrefix + "0", val: posRec{pos: pos}, rev: h.rev}, deadline, func(rep kvReply) {
		if rep.err == nil {
			h.rev, h.committed = rep.rev, pos
		}
		if rep.err != nil && rep.err != errKVFenced {
			s.log.add("%s release of p%d failed: %v (retried next round)", m.id, h.p, rep.err)
			next()
			return
		}
		if m.releases[h.p] == h {
			delete(m.releases, h.p)
		}
		s.res.Releases++
		s.log.add("%s RELEASES p%d at %s (err %v)", m.id, h.p, s.log.pos(pos), rep.err)
		next()
	})
}

// drop stops reading h without committing (fenced).
func (m *member) drop(h *holding) {
	if m.parts[h.p] == h {
		delete(m.parts, h.p)
	}
	h.stop()
}
