package core

import (
	"slices"

	"github.com/raidq/raidq/stripe/invariants"
)

// The Kafka group's other inputs (kafka_group.go has the model): SyncGroup,
// Heartbeat, LeaveGroup, OffsetCommit's check, the clock, the driver's
// report of a write, and deletion.

// Sync handles a SyncGroup request. Followers wait for the leader's; the
// leader's assignments move the group to Stable and answer every waiting
// member.
func (g *KafkaGroup) Sync(now int64, s KafkaSync) KafkaOutput {
	var out KafkaOutput
	if code := g.checkSync(s); code != KafkaNone {
		out.Syncs = append(out.Syncs, KafkaSyncReply{Req: s.Req, Code: code})
		return out
	}
	m := g.members[s.Member]
	m.heard = now
	if g.state == KafkaStable {
		out.Syncs = append(out.Syncs, g.syncReply(s.Req, m))
		return out
	}
	if m.syncing && m.syncReq != s.Req {
		out.Syncs = append(out.Syncs, KafkaSyncReply{Req: m.syncReq, Code: KafkaRebalanceInProgress})
	}
	m.syncing, m.syncReq = true, s.Req
	if m.id == g.leader {
		g.assign(now, s.Assignments, &out)
	}
	return g.finish(out)
}

func (g *KafkaGroup) checkSync(s KafkaSync) KafkaCode {
	m := g.members[s.Member]
	switch {
	case g.state == KafkaDead:
		return KafkaCoordinatorNotAvailable
	case g.fenced(s.Member, s.Instance):
		return KafkaFencedInstanceID
	case m == nil || g.state == KafkaEmpty:
		return KafkaUnknownMemberID
	case s.Generation != g.generation:
		return KafkaIllegalGeneration
	case s.ProtocolType != "" && s.ProtocolType != g.protocolType, s.Protocol != "" && s.Protocol != g.protocol:
		return KafkaInconsistentGroupProtocol
	case g.state == KafkaPreparingRebalance, g.holding:
		return KafkaRebalanceInProgress
	}
	return KafkaNone
}

func (g *KafkaGroup) syncReply(req uint64, m *kafkaMember) KafkaSyncReply {
	return KafkaSyncReply{Req: req, ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: m.assignment}
}

// assign takes the leader's assignments (ids not in the group are
// ignored, members missing get none). Too large for the state's bound,
// they fail every waiting sync with UNKNOWN_SERVER_ERROR and the group
// rebalances, as Kafka does when it cannot store them.
func (g *KafkaGroup) assign(now int64, as map[string][]byte, out *KafkaOutput) {
	cost := 0
	for _, m := range g.members {
		a := as[m.id]
		if len(a) > g.cfg.MaxMemberData {
			cost = g.cfg.MaxStateBytes + 1
			break
		}
		c := *m
		c.assignment = a
		cost += c.cost(len(m.metadata(g.protocol)))
	}
	if cost > g.cfg.MaxStateBytes {
		g.failSyncs(KafkaUnknownServerError, out)
		g.prepareRebalance(now, "the leader's assignment is too large to store", out)
		return
	}
	for _, m := range g.members {
		m.assignment = as[m.id]
	}
	g.state = KafkaStable
	g.dirty = true
	for _, id := range g.order {
		if m := g.members[id]; m.syncing {
			out.Syncs = append(out.Syncs, g.syncReply(m.syncReq, m))
			m.syncing, m.syncReq = false, 0
		}
	}
}

// Heartbeat handles a Heartbeat request: it keeps the member's session,
// and tells it to rejoin while the group rebalances.
func (g *KafkaGroup) Heartbeat(now int64, member, instance string, generation int32) KafkaCode {
	m := g.members[member]
	switch {
	case g.state == KafkaDead:
		return KafkaCoordinatorNotAvailable
	case g.fenced(member, instance):
		return KafkaFencedInstanceID
	case m == nil || g.state == KafkaEmpty:
		return KafkaUnknownMemberID
	case generation != g.generation:
		return KafkaIllegalGeneration
	}
	m.heard = now
	if g.state == KafkaPreparingRebalance {
		return KafkaRebalanceInProgress
	}
	return KafkaNone
}

// Leave handles a LeaveGroup request: one code per member named.
func (g *KafkaGroup) Leave(now int64, leaving []KafkaLeave) ([]KafkaCode, KafkaOutput) {
	var out KafkaOutput
	codes := make([]KafkaCode, len(leaving))
	removed, unpended := false, false
	for i, l := range leaving {
		id := l.Member
		if id == "" {
			id = g.instances[l.Instance]
		}
		_, pending := g.pending[id]
		switch {
		case g.state == KafkaDead:
			codes[i] = KafkaCoordinatorNotAvailable
		case id == "":
			codes[i] = KafkaUnknownMemberID
		case g.fenced(id, l.Instance):
			codes[i] = KafkaFencedInstanceID
		case pending:
			delete(g.pending, id)
			unpended = true
		case g.members[id] == nil:
			codes[i] = KafkaUnknownMemberID
		default:
			g.remove(id, KafkaUnknownMemberID, "left the group", &out)
			removed = true
		}
	}
	if removed {
		g.afterRemoval(now, "a member left", &out)
	} else if unpended {
		g.tryCompleteJoin(now, &out)
	}
	return codes, g.finish(out)
}

// Commit checks an OffsetCommit (Kafka's rules): generation -1 with an
// empty group is a simple commit (no member, no generation); while the
// generation's assignments are being handed out the group answers
// REBALANCE_IN_PROGRESS; otherwise the member must be in the group at
// its generation, which in PreparingRebalance is still the old one (a
// member commits before it rejoins). A commit keeps the session.
func (g *KafkaGroup) Commit(now int64, member, instance string, generation int32) KafkaCode {
	_, pending := g.pending[member]
	m := g.members[member]
	switch {
	case g.state == KafkaDead:
		return KafkaCoordinatorNotAvailable
	case pending:
		return KafkaUnknownMemberID
	case generation < 0 && g.state == KafkaEmpty:
		return KafkaNone
	case g.state == KafkaCompletingRebalance:
		return KafkaRebalanceInProgress
	case g.fenced(member, instance):
		return KafkaFencedInstanceID
	case m == nil:
		return KafkaUnknownMemberID
	case generation != g.generation:
		return KafkaIllegalGeneration
	}
	m.heard = now
	return KafkaNone
}

// Tick advances the clock: sessions expire (not while a generation waits
// for its write), member ids handed out lapse, a join phase ends at its
// deadline or at the end of the initial delay.
func (g *KafkaGroup) Tick(now int64) KafkaOutput {
	var out KafkaOutput
	if g.state == KafkaDead {
		return out
	}
	if !g.holding {
		g.expire(now, &out)
	}
	if g.state == KafkaPreparingRebalance {
		switch {
		case g.initialUntil != 0 && now >= g.initialUntil, g.initialUntil == 0 && now >= g.joinDeadline:
			g.completeJoin(now, &out)
		default:
			g.tryCompleteJoin(now, &out)
		}
	}
	return g.finish(out)
}

// expire removes members silent for their session. A member waiting
// here in JoinGroup or SyncGroup is not silent: the coordinator owes it
// the answer.
func (g *KafkaGroup) expire(now int64, out *KafkaOutput) {
	for id, until := range g.pending {
		if now >= until {
			delete(g.pending, id)
		}
	}
	var gone []string
	for _, id := range g.order {
		m := g.members[id]
		if !m.joining && !m.syncing && now-m.heard >= m.session {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		g.remove(id, KafkaUnknownMemberID, "session timed out", out)
	}
	if len(gone) > 0 {
		g.afterRemoval(now, "a member's session timed out", out)
	}
}

// Persisted reports that the state of Persist seq (and every earlier
// one) is written. It releases the join replies of a generation that
// waited for it; each session restarts now, as they go out.
func (g *KafkaGroup) Persisted(now int64, seq uint64) KafkaOutput {
	var out KafkaOutput
	if !g.holding || g.barrier == 0 || seq < g.barrier {
		return out
	}
	g.holding, g.barrier = false, 0
	for _, m := range g.members {
		m.heard = now
	}
	out.Joins, g.held = g.held, nil
	out.Released = g.generation
	if invariants.Enabled {
		g.checkGeneration("released", out.Joins, true)
	}
	return out
}

// Delete ends an empty group (DeleteGroups): it is Dead from now on.
func (g *KafkaGroup) Delete() KafkaCode {
	switch {
	case g.state == KafkaDead:
		return KafkaGroupIDNotFound
	case g.state != KafkaEmpty || !g.Idle():
		return KafkaNonEmptyGroup
	}
	g.state = KafkaDead
	return KafkaNone
}

// Snapshot is the group as persisted and described.
func (g *KafkaGroup) Snapshot() KafkaSnapshot {
	s := KafkaSnapshot{Generation: g.generation, State: g.state, ProtocolType: g.protocolType, Protocol: g.protocol,
		Leader: g.leader}
	for _, id := range g.order {
		m := g.members[id]
		s.Members = append(s.Members, KafkaMemberState{ID: m.id, Instance: m.instance, ClientID: m.clientID,
			ClientHost: m.host, Session: m.session, Rebalance: m.rebalance, Metadata: m.metadata(g.protocol),
			Assignment: m.assignment})
	}
	return s
}

// checkOutput asserts what one input answered: successful join replies
// only at a generation already durable (not while its replies are held
// for the write: checkGeneration), successful sync replies only once
// the leader's assignments made the group Stable.
func (g *KafkaGroup) checkOutput(out KafkaOutput) {
	ok := 0
	for _, r := range out.Joins {
		if r.Code == KafkaNone {
			ok++
		}
	}
	if ok > 0 && g.holding {
		invariants.Failf("kafka group: %d join replies of generation %d answered before its write is durable", ok, g.generation)
	}
	g.checkGeneration("answered", out.Joins, false)
	for _, r := range out.Syncs {
		if r.Code == KafkaNone && g.state != KafkaStable {
			invariants.Failf("kafka group: a sync answered in state %v at generation %d", g.state, g.generation)
		}
	}
}

// remove takes a member out, answering what of it waits here with code.
func (g *KafkaGroup) remove(id string, code KafkaCode, reason string, out *KafkaOutput) {
	m := g.members[id]
	if m.joining {
		out.Joins = append(out.Joins, joinError(m.joinReq, code, id))
	}
	if m.syncing {
		out.Syncs = append(out.Syncs, KafkaSyncReply{Req: m.syncReq, Code: code})
	}
	g.held = slices.DeleteFunc(g.held, func(r KafkaJoinReply) bool {
		if r.Member == id {
			out.Joins = append(out.Joins, joinError(r.Req, code, id))
		}
		return r.Member == id
	})
	delete(g.members, id)
	g.order = slices.DeleteFunc(g.order, func(o string) bool { return o == id })
	if m.instance != "" && g.instances[m.instance] == id {
		delete(g.instances, m.instance)
	}
	if g.leader == id {
		g.leader = ""
	}
	g.dirty = true
	out.Removed = append(out.Removed, KafkaRemoved{Member: id, Reason: reason})
}

// afterRemoval rebalances a group that lost members, or ends a join
// phase that waited for them.
func (g *KafkaGroup) afterRemoval(now int64, reason string, out *KafkaOutput) {
	if g.state == KafkaStable || g.state == KafkaCompletingRebalance {
		g.prepareRebalance(now, reason, out)
	}
	g.tryCompleteJoin(now, out)
}

// finish asks for the state to be written if this input changed it.
func (g *KafkaGroup) finish(out KafkaOutput) KafkaOutput {
	if invariants.Enabled {
		g.checkOutput(out)
	}
	if !g.dirty {
		return out
	}
	g.seq++
	out.Persist = &KafkaPersist{Seq: g.seq, Barrier: g.needBarrier, State: g.Snapshot()}
	if g.needBarrier && g.holding {
		g.barrier = g.seq
	}
	g.dirty, g.needBarrier = false, false
	return out
}
