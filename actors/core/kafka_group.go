package core

import (
	"bytes"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/raidq/raidq/stripe/invariants"
)

// Kafka's classic consumer group protocol, the coordinator's side: one
// group's state machine (a Kafka gateway's actors/kafka/coordinator.go is
// its driver, the record is bus/meta's kgroup.<name>). It follows Kafka's
// own GroupCoordinator: states Empty, PreparingRebalance,
// CompletingRebalance, Stable and Dead; JoinGroup gathers the members
// (KIP-394: a new member of JoinGroup v4+ is first told its id with
// MEMBER_ID_REQUIRED), the join phase ends when every known member has
// rejoined or the longest rebalance timeout has passed, the leader's
// SyncGroup hands out the assignments, heartbeats keep sessions.
//
// Pure: time is the driver's monotonic clock in ns, given with every
// input; member ids are drawn by the driver; nothing is written or sent
// here. Each input returns a KafkaOutput: replies to pending JoinGroup
// and SyncGroup requests (by the request id given with them) and the
// state to persist.
//
// Persist before the new generation. When a join phase ends the
// generation rises and the output asks for a Barrier persist: the
// JoinGroup replies of the new generation are held until the driver
// reports the write durable (Persisted). The write is a compare-and-set,
// so two coordinators that both think they own the group cannot both
// hand out generation G+1; and no member can sync, heartbeat or commit at
// a generation a successor would not find. Every other change (a sync's
// assignments, a member leaving) is written behind.
//
// KV stalls judge nobody. While a Barrier write is outstanding no session
// expires (the members are waiting for the held replies, not silent),
// and each session restarts when the replies go out. Heartbeats and
// commits never wait for a write.
//
// A successor (LoadKafkaGroup). A coordinator that loads a group with
// members does not trust the generation's heartbeats: the group starts in
// PreparingRebalance at the loaded generation, so heartbeats get
// REBALANCE_IN_PROGRESS and the members rejoin: one rebalance. Commits at
// the loaded generation from its members are accepted until that join
// phase ends, as Kafka accepts them in PreparingRebalance: a member
// finishing its last batch before it rejoins loses nothing.
//
// Static members (KIP-345) are accepted and otherwise treated as dynamic.
// Their group.instance.id is kept and shown, skips MEMBER_ID_REQUIRED (as
// in Kafka), and fences: a request naming an instance id held by another
// member id gets FENCED_INSTANCE_ID, and a new member joining with it
// replaces the member that held it. But a restarted static member costs
// a rebalance (Kafka hands it its old assignment without one), and static
// members expire with their session like anyone.

// KafkaCode is an error code of Kafka's protocol (the numbers kerr names).
type KafkaCode int16

// The codes the coordinator answers with.
const (
	KafkaNone                      KafkaCode = 0
	KafkaUnknownServerError        KafkaCode = -1
	KafkaOffsetMetadataTooLarge    KafkaCode = 12
	KafkaCoordinatorLoadInProgress KafkaCode = 14
	KafkaCoordinatorNotAvailable   KafkaCode = 15
	KafkaNotCoordinator            KafkaCode = 16
	KafkaIllegalGeneration         KafkaCode = 22
	KafkaInconsistentGroupProtocol KafkaCode = 23
	KafkaInvalidGroupID            KafkaCode = 24
	KafkaUnknownMemberID           KafkaCode = 25
	KafkaInvalidSessionTimeout     KafkaCode = 26
	KafkaRebalanceInProgress       KafkaCode = 27
	KafkaInvalidRequest            KafkaCode = 42
	KafkaNonEmptyGroup             KafkaCode = 68
	KafkaGroupIDNotFound           KafkaCode = 69
	KafkaMemberIDRequired          KafkaCode = 79
	KafkaGroupMaxSizeReached       KafkaCode = 81
	KafkaFencedInstanceID          KafkaCode = 82
)

// KafkaGroupState is a classic group's state.
type KafkaGroupState uint8

// The states, as Kafka names them (String).
const (
	KafkaEmpty KafkaGroupState = iota
	KafkaPreparingRebalance
	KafkaCompletingRebalance
	KafkaStable
	KafkaDead
)

var kafkaStateNames = [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

func (s KafkaGroupState) String() string {
	if int(s) < len(kafkaStateNames) {
		return kafkaStateNames[s]
	}
	return "Unknown"
}

// ParseKafkaGroupState is String's inverse.
func ParseKafkaGroupState(s string) (KafkaGroupState, bool) {
	i := slices.Index(kafkaStateNames[:], s)
	return KafkaGroupState(max(i, 0)), i >= 0
}

// KafkaGroupConfig bounds one group. Durations are ns.
type KafkaGroupConfig struct {
	// MinSession and MaxSession bound a member's session timeout (Kafka's
	// group.min/max.session.timeout.ms): INVALID_SESSION_TIMEOUT outside.
	MinSession, MaxSession int64
	// MaxRebalance caps a member's rebalance timeout. It is clamped, not
	// refused: Kafka Streams asks for Integer.MAX_VALUE ms.
	MaxRebalance int64
	// InitialDelay is Kafka's group.initial.rebalance.delay.ms: the first
	// join phase of an empty group lasts this long, and each member
	// joining during it extends it by as much, up to the rebalance
	// timeout, so consumers started together share one generation.
	// 0: the join phase ends as soon as every member has joined.
	InitialDelay int64
	// MaxMembers bounds members plus member ids handed out and not yet used.
	MaxMembers int
	// MaxProtocols bounds the protocols one JoinGroup offers; MaxString
	// the bytes of any id, host or protocol name; MaxMemberData a
	// member's protocol metadata (all protocols) and its assignment.
	MaxProtocols, MaxString, MaxMemberData int
	// MaxStateBytes bounds the persisted state by an upper-bound estimate
	// of its encoding (kafkaMember.cost): past it joins get
	// GROUP_MAX_SIZE_REACHED and a leader's too large assignment
	// UNKNOWN_SERVER_ERROR (as Kafka answers one it cannot store).
	MaxStateBytes int
}

// DefaultKafkaGroupConfig: Kafka's session bounds (6 s to 30 min) and a
// 3 s initial delay (Kafka's default), 256 members, the state in 144 KiB.
func DefaultKafkaGroupConfig() KafkaGroupConfig {
	return KafkaGroupConfig{MinSession: int64(6 * time.Second), MaxSession: int64(30 * time.Minute),
		MaxRebalance: int64(30 * time.Minute), InitialDelay: int64(3 * time.Second), MaxMembers: 256,
		MaxProtocols: 16, MaxString: 255, MaxMemberData: 64 << 10, MaxStateBytes: 144 << 10}
}

// KafkaProtocol is one protocol a member offers: its name (an assignor:
// "range", "cooperative-sticky") and its metadata (the subscription).
type KafkaProtocol struct {
	Name     string
	Metadata []byte
}

// KafkaJoin is one JoinGroup request.
type KafkaJoin struct {
	// Req is the driver's id of this request; its reply carries it.
	Req uint64
	// Member is the member id ("" for a new member); NewMember is the id
	// a new member gets (the driver draws it: Kafka's client id, a dash
	// and random hex).
	Member, NewMember string
	// Instance is the group.instance.id ("": dynamic).
	Instance             string
	ClientID, ClientHost string
	ProtocolType         string
	Protocols            []KafkaProtocol
	// Session and Rebalance are the member's timeouts in ns (Rebalance 0:
	// JoinGroup v0, which has none: the session).
	Session, Rebalance int64
	// RequireKnownMember: JoinGroup v4+ (KIP-394).
	RequireKnownMember bool
}

// KafkaSync is one SyncGroup request.
type KafkaSync struct {
	Req              uint64
	Member, Instance string
	Generation       int32
	// ProtocolType and Protocol are checked if given (v5+; "": not given).
	ProtocolType, Protocol string
	// Assignments come from the leader: member id → assignment.
	Assignments map[string][]byte
}

// KafkaLeave names one member leaving (by member id, or for a static
// member of LeaveGroup v3+ by instance id alone).
type KafkaLeave struct{ Member, Instance string }

// KafkaJoinMember is one member as the leader's JoinGroup reply lists it.
type KafkaJoinMember struct {
	ID, Instance string
	Metadata     []byte
}

// KafkaJoinReply answers JoinGroup request Req.
type KafkaJoinReply struct {
	Req  uint64
	Code KafkaCode
	// Generation is -1 with an error.
	Generation             int32
	ProtocolType, Protocol string
	Leader, Member         string
	// Members is the group, for the leader only.
	Members []KafkaJoinMember
}

// KafkaSyncReply answers SyncGroup request Req.
type KafkaSyncReply struct {
	Req                    uint64
	Code                   KafkaCode
	ProtocolType, Protocol string
	Assignment             []byte
}

// KafkaMemberState is one member as persisted and described.
type KafkaMemberState struct {
	ID, Instance, ClientID, ClientHost string
	Session, Rebalance                 int64
	// Metadata is the member's metadata for the group's protocol.
	Metadata, Assignment []byte
}

// KafkaSnapshot is a group's state as persisted (and loaded from).
type KafkaSnapshot struct {
	Generation                     int32
	State                          KafkaGroupState
	ProtocolType, Protocol, Leader string
	Members                        []KafkaMemberState
}

// KafkaPersist asks the driver to write the group's state. Seq orders
// them; a Barrier must be written at once (compare-and-set) and reported
// with Persisted, which releases the new generation's JoinGroup replies.
type KafkaPersist struct {
	Seq     uint64
	Barrier bool
	State   KafkaSnapshot
}

// KafkaRemoved is a member removed from the group, and why.
type KafkaRemoved struct{ Member, Reason string }

// KafkaOutput is what one input asks the driver to do.
type KafkaOutput struct {
	Joins   []KafkaJoinReply
	Syncs   []KafkaSyncReply
	Persist *KafkaPersist
	// Rebalance is why a rebalance started ("": none started).
	Rebalance string
	Removed   []KafkaRemoved
	// Released is the generation whose JoinGroup replies go out (0: none).
	Released int32
}

type kafkaMember struct {
	id, instance, clientID, host string
	protocols                    []KafkaProtocol
	session, rebalance           int64
	heard                        int64 // the last request from it
	joining, syncing             bool  // a JoinGroup / SyncGroup of it waits here
	joinReq, syncReq             uint64
	assignment                   []byte
}

// KafkaGroup is one group's coordinator state.
type KafkaGroup struct {
	cfg                            KafkaGroupConfig
	state                          KafkaGroupState
	generation                     int32
	protocolType, protocol, leader string
	members                        map[string]*kafkaMember
	order                          []string          // member ids in join order
	instances                      map[string]string // instance id → member id
	pending                        map[string]int64  // ids handed out (MEMBER_ID_REQUIRED) → expiry

	joinDeadline int64 // PreparingRebalance: the join phase ends then at the latest
	initialUntil int64 // in the initial delay: the join phase ends then (0: not in it)
	initialCap   int64 // the initial delay's extensions stop here

	seq         uint64 // the last Persist's
	dirty       bool   // the persisted state changed during this input
	needBarrier bool   // ... and a generation rose
	holding     bool   // the new generation's join replies wait for Persisted(barrier)
	barrier     uint64
	held        []KafkaJoinReply
}

// NewKafkaGroup starts a group that has no record: Empty, generation 0.
func NewKafkaGroup(cfg KafkaGroupConfig) *KafkaGroup {
	return &KafkaGroup{cfg: cfg, members: make(map[string]*kafkaMember), instances: make(map[string]string),
		pending: make(map[string]int64)}
}

// LoadKafkaGroup starts a group from its persisted state at now. A group
// with members starts rebalancing at the loaded generation (see above):
// each member's session runs from now, the join phase ends at the latest
// after the longest rebalance timeout.
func LoadKafkaGroup(cfg KafkaGroupConfig, s KafkaSnapshot, now int64) *KafkaGroup {
	g := NewKafkaGroup(cfg)
	g.generation, g.protocolType, g.protocol = s.Generation, s.ProtocolType, s.Protocol
	for _, ms := range s.Members {
		if ms.ID == "" || g.members[ms.ID] != nil {
			continue
		}
		m := &kafkaMember{id: ms.ID, instance: ms.Instance, clientID: ms.ClientID, host: ms.ClientHost,
			session: ms.Session, rebalance: g.clampRebalance(ms.Session, ms.Rebalance), heard: now,
			protocols: []KafkaProtocol{{Name: s.Protocol, Metadata: ms.Metadata}}, assignment: ms.Assignment}
		g.addMember(m)
	}
	// A state written while its first join phase ran (no protocol chosen
	// yet) holds members that were never given a generation: loaded, they
	// would offer no protocol, so every join would be refused as
	// INCONSISTENT_GROUP_PROTOCOL until their sessions lapsed (a drill with
	// two gateways racing for a new group saw 30 s of it). Start empty:
	// they rejoin as new members.
	if len(g.members) == 0 || s.State == KafkaEmpty || s.State == KafkaDead || s.Protocol == "" {
		g.members, g.order, g.instances = make(map[string]*kafkaMember), nil, make(map[string]string)
		g.protocol = ""
		return g
	}
	if g.members[s.Leader] != nil {
		g.leader = s.Leader
	}
	g.state = KafkaPreparingRebalance
	g.joinDeadline = now + g.maxRebalance()
	return g
}

// State is the group's state.
func (g *KafkaGroup) State() KafkaGroupState { return g.state }

// Generation is the group's generation.
func (g *KafkaGroup) Generation() int32 { return g.generation }

// Idle: no members, no member ids handed out, nothing waiting: a driver
// may drop the group from memory once its state is written.
func (g *KafkaGroup) Idle() bool {
	return len(g.members) == 0 && len(g.pending) == 0 && !g.holding
}

// Join handles a JoinGroup request.
func (g *KafkaGroup) Join(now int64, j KafkaJoin) KafkaOutput {
	var out KafkaOutput
	if code := g.checkJoin(j); code != KafkaNone {
		out.Joins = append(out.Joins, joinError(j.Req, code, j.Member))
		return out
	}
	j.Rebalance = g.clampRebalance(j.Session, j.Rebalance)
	j.ClientID, j.ClientHost = clip(j.ClientID, g.cfg.MaxString), clip(j.ClientHost, g.cfg.MaxString)
	if j.Member == "" {
		g.joinNew(now, j, &out)
	} else {
		g.joinKnown(now, j, &out)
	}
	return g.finish(out)
}

func joinError(req uint64, code KafkaCode, member string) KafkaJoinReply {
	return KafkaJoinReply{Req: req, Code: code, Generation: -1, Member: member}
}

func (g *KafkaGroup) checkJoin(j KafkaJoin) KafkaCode {
	switch {
	case g.state == KafkaDead:
		return KafkaCoordinatorNotAvailable
	case j.Session < g.cfg.MinSession || j.Session > g.cfg.MaxSession:
		return KafkaInvalidSessionTimeout
	case j.ProtocolType == "" || len(j.Protocols) == 0:
		return KafkaInconsistentGroupProtocol
	case !g.joinFits(j):
		return KafkaInvalidRequest
	case !g.supports(j):
		return KafkaInconsistentGroupProtocol
	case j.Member != "" && g.fenced(j.Member, j.Instance):
		return KafkaFencedInstanceID
	}
	return KafkaNone
}

// joinFits checks a join's sizes, and that what is stored is UTF-8.
func (g *KafkaGroup) joinFits(j KafkaJoin) bool {
	if len(j.Protocols) > g.cfg.MaxProtocols || !g.validString(j.ProtocolType) || !g.validString(j.Instance) {
		return false
	}
	data := 0
	for _, p := range j.Protocols {
		if p.Name == "" || !g.validString(p.Name) {
			return false
		}
		data += len(p.Metadata)
	}
	return data <= g.cfg.MaxMemberData
}

func (g *KafkaGroup) validString(s string) bool {
	return len(s) <= g.cfg.MaxString && utf8.ValidString(s)
}

// clip cuts s to n bytes at a rune boundary, making it UTF-8.
func clip(s string, n int) string {
	if len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return string(bytes.ToValidUTF8([]byte(s), []byte("?")))
}

// supports: a non-empty group takes a member of its protocol type that
// offers a protocol every member offers (Kafka counts the rejoining member
// itself too).
func (g *KafkaGroup) supports(j KafkaJoin) bool {
	if g.state == KafkaEmpty || len(g.members) == 0 {
		return true
	}
	if j.ProtocolType != g.protocolType {
		return false
	}
	for _, p := range j.Protocols {
		if g.allOffer(p.Name) {
			return true
		}
	}
	return false
}

func (g *KafkaGroup) allOffer(name string) bool {
	for _, m := range g.members {
		if !slices.ContainsFunc(m.protocols, func(p KafkaProtocol) bool { return p.Name == name }) {
			return false
		}
	}
	return true
}

// fenced: a request naming instance id instance for member id member,
// while the instance id belongs to another member.
func (g *KafkaGroup) fenced(member, instance string) bool {
	owner := g.instances[instance]
	return instance != "" && owner != "" && owner != member
}

func (g *KafkaGroup) clampRebalance(session, rebalance int64) int64 {
	if rebalance <= 0 {
		rebalance = session
	}
	return min(rebalance, g.cfg.MaxRebalance)
}

func (g *KafkaGroup) joinNew(now int64, j KafkaJoin, out *KafkaOutput) {
	id := j.NewMember
	_, taken := g.pending[id]
	if id == "" || taken || g.members[id] != nil || !g.validString(id) {
		out.Joins = append(out.Joins, joinError(j.Req, KafkaUnknownServerError, ""))
		return
	}
	replaced := g.instances[j.Instance]
	room := len(g.members) + len(g.pending)
	if replaced != "" {
		room--
	}
	m := newKafkaMember(id, j, now)
	if room >= g.cfg.MaxMembers || g.stateCost(replaced)+m.cost(maxMetadata(m.protocols)) > g.cfg.MaxStateBytes {
		out.Joins = append(out.Joins, joinError(j.Req, KafkaGroupMaxSizeReached, ""))
		return
	}
	if j.RequireKnownMember && j.Instance == "" {
		g.pending[id] = now + j.Session
		out.Joins = append(out.Joins, joinError(j.Req, KafkaMemberIDRequired, id))
		return
	}
	if replaced != "" {
		g.remove(replaced, KafkaFencedInstanceID, "replaced by a new member with its instance id", out)
	}
	g.join(now, m, j.ProtocolType, out)
}

func newKafkaMember(id string, j KafkaJoin, now int64) *kafkaMember {
	return &kafkaMember{id: id, instance: j.Instance, clientID: j.ClientID, host: j.ClientHost, protocols: j.Protocols,
		session: j.Session, rebalance: j.Rebalance, heard: now, joining: true, joinReq: j.Req}
}

// join adds m, waiting in its JoinGroup, and rebalances. The first
// member of an empty group sets its protocol type.
func (g *KafkaGroup) join(now int64, m *kafkaMember, protocolType string, out *KafkaOutput) {
	if g.state == KafkaEmpty {
		g.protocolType = protocolType
	}
	g.addMember(m)
	g.dirty = true
	switch {
	case g.state != KafkaPreparingRebalance:
		g.prepareRebalance(now, "member "+m.id+" joined", out)
	case g.initialUntil != 0:
		g.initialUntil = min(now+g.cfg.InitialDelay, g.initialCap)
	}
	g.tryCompleteJoin(now, out)
}

func (g *KafkaGroup) addMember(m *kafkaMember) {
	g.members[m.id] = m
	g.order = append(g.order, m.id)
	if m.instance != "" {
		g.instances[m.instance] = m.id
	}
}

func (g *KafkaGroup) joinKnown(now int64, j KafkaJoin, out *KafkaOutput) {
	if _, ok := g.pending[j.Member]; ok {
		m := newKafkaMember(j.Member, j, now)
		if g.stateCost("")+m.cost(maxMetadata(m.protocols)) > g.cfg.MaxStateBytes {
			out.Joins = append(out.Joins, joinError(j.Req, KafkaGroupMaxSizeReached, j.Member))
			return
		}
		delete(g.pending, j.Member)
		g.join(now, m, j.ProtocolType, out)
		return
	}
	m := g.members[j.Member]
	if m == nil || g.state == KafkaEmpty {
		out.Joins = append(out.Joins, joinError(j.Req, KafkaUnknownMemberID, j.Member))
		return
	}
	next := newKafkaMember(m.id, j, now)
	if g.stateCost(m.id)+next.cost(maxMetadata(next.protocols)) > g.cfg.MaxStateBytes {
		out.Joins = append(out.Joins, joinError(j.Req, KafkaGroupMaxSizeReached, j.Member))
		return
	}
	same := m.sameProtocols(j.Protocols)
	switch {
	case g.state == KafkaCompletingRebalance && same && g.holding:
		m.heard = now
		g.rekeyHeld(m.id, j.Req)
		return
	case g.state == KafkaCompletingRebalance && same, g.state == KafkaStable && same && m.id != g.leader:
		// Nothing changed: the current generation again (Kafka's answer
		// to a follower's rejoin).
		m.heard = now
		out.Joins = append(out.Joins, g.joinReply(j.Req, m))
		return
	case g.state != KafkaPreparingRebalance:
		g.prepareRebalance(now, "member "+m.id+" rejoined", out)
	}
	g.update(now, m, j, out)
	g.tryCompleteJoin(now, out)
}

// update takes a rejoining member's request, superseding a JoinGroup of
// it still waiting here (the client gave up on that one).
func (g *KafkaGroup) update(now int64, m *kafkaMember, j KafkaJoin, out *KafkaOutput) {
	if m.joining && m.joinReq != j.Req {
		out.Joins = append(out.Joins, joinError(m.joinReq, KafkaRebalanceInProgress, m.id))
	}
	m.protocols, m.session, m.rebalance = j.Protocols, j.Session, j.Rebalance
	m.clientID, m.host = j.ClientID, j.ClientHost
	m.joining, m.joinReq, m.heard = true, j.Req, now
	g.dirty = true
}

func (m *kafkaMember) sameProtocols(ps []KafkaProtocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b KafkaProtocol) bool {
		return a.Name == b.Name && bytes.Equal(a.Metadata, b.Metadata)
	})
}

// rekeyHeld points a held join reply at a retried request.
func (g *KafkaGroup) rekeyHeld(member string, req uint64) {
	for i := range g.held {
		if g.held[i].Member == member {
			g.held[i].Req = req
		}
	}
}

// prepareRebalance starts a join phase: pending syncs are told to rejoin,
// a generation still waiting for its write is abandoned (its members go
// on waiting in JoinGroup for the next one).
func (g *KafkaGroup) prepareRebalance(now int64, reason string, out *KafkaOutput) {
	if g.state == KafkaCompletingRebalance {
		g.failSyncs(KafkaRebalanceInProgress, out)
		for _, m := range g.members {
			m.assignment = nil
		}
	}
	g.restoreHeld()
	if g.state == KafkaEmpty && g.cfg.InitialDelay > 0 {
		g.initialCap = now + g.maxRebalance()
		g.initialUntil = min(now+g.cfg.InitialDelay, g.initialCap)
	}
	g.joinDeadline = now + g.maxRebalance()
	g.state = KafkaPreparingRebalance
	g.dirty = true
	out.Rebalance = reason
}

func (g *KafkaGroup) restoreHeld() {
	for _, r := range g.held {
		if m := g.members[r.Member]; m != nil {
			m.joining, m.joinReq = true, r.Req
		}
	}
	g.held, g.holding, g.barrier, g.needBarrier = nil, false, 0, false
}

func (g *KafkaGroup) failSyncs(code KafkaCode, out *KafkaOutput) {
	for _, id := range g.order {
		if m := g.members[id]; m.syncing {
			out.Syncs = append(out.Syncs, KafkaSyncReply{Req: m.syncReq, Code: code})
			m.syncing, m.syncReq = false, 0
		}
	}
}

func (g *KafkaGroup) maxRebalance() int64 {
	var d int64
	for _, m := range g.members {
		d = max(d, m.rebalance)
	}
	return d
}

func (g *KafkaGroup) tryCompleteJoin(now int64, out *KafkaOutput) {
	if g.state != KafkaPreparingRebalance || g.initialUntil != 0 || len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if !m.joining {
			return
		}
	}
	g.completeJoin(now, out)
}

// completeJoin ends the join phase: members that did not rejoin are
// removed, the generation rises, and the join replies are held until the
// new state is written.
func (g *KafkaGroup) completeJoin(now int64, out *KafkaOutput) {
	for _, id := range slices.Clone(g.order) {
		if !g.members[id].joining {
			g.remove(id, KafkaUnknownMemberID, "did not rejoin within the rebalance timeout", out)
		}
	}
	g.initialUntil = 0
	g.generation++ // int32: 2^31 rebalances are not expected
	g.dirty, g.needBarrier = true, true
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader = KafkaEmpty, "", ""
		return
	}
	g.protocol = g.selectProtocol()
	if g.members[g.leader] == nil {
		g.leader = g.order[0]
	}
	g.state = KafkaCompletingRebalance
	g.holding = true
	for _, id := range g.order {
		m := g.members[id]
		m.assignment = nil
		g.held = append(g.held, g.joinReply(m.joinReq, m))
		m.joining, m.joinReq = false, 0
	}
	if invariants.Enabled {
		g.checkGeneration("completed join", g.held, true)
	}
}

// checkGeneration asserts one generation's join replies (the successful
// ones among replies): each at the group's generation, under the one
// leader, a member, at most one per member, and (all, when the join
// phase ends or the replies are released) one for every member. So
// every member of a generation is told the same leader and no member
// is handed two assignments' worth of it. Join replies of a new
// generation go out only once its write is durable (Persisted): never
// while the group holds them (checked as each input's output is made,
// finish, and as Persisted releases them).
func (g *KafkaGroup) checkGeneration(where string, replies []KafkaJoinReply, all bool) {
	seen := make(map[string]bool)
	for _, r := range replies {
		if r.Code != KafkaNone {
			continue
		}
		m := g.members[r.Member]
		switch {
		case r.Generation != g.generation || r.Leader != g.leader:
			invariants.Failf("kafka group: %s reply to %s at generation %d leader %q, the group is at %d leader %q",
				where, r.Member, r.Generation, r.Leader, g.generation, g.leader)
		case m == nil || seen[r.Member]:
			invariants.Failf("kafka group: %s reply to %s, a member=%v, twice=%v, at generation %d", where, r.Member, m != nil, seen[r.Member], r.Generation)
		case g.members[g.leader] == nil:
			invariants.Failf("kafka group: %s reply: generation %d's leader %q is not a member", where, g.generation, g.leader)
		case (r.Member == g.leader) != (len(r.Members) > 0):
			invariants.Failf("kafka group: %s reply to %s lists %d members, leader %q", where, r.Member, len(r.Members), g.leader)
		}
		seen[r.Member] = true
	}
	if all && len(seen) != len(g.members) {
		invariants.Failf("kafka group: %s: %d replies at generation %d for %d members", where, len(seen), g.generation, len(g.members))
	}
}

// selectProtocol is Kafka's vote: of the protocols every member offers,
// each member votes for the first in its own order; most votes wins (a
// tie: the smaller name).
func (g *KafkaGroup) selectProtocol() string {
	votes := make(map[string]int)
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.allOffer(p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for name, n := range votes {
		if best == "" || n > votes[best] || n == votes[best] && name < best {
			best = name
		}
	}
	return best
}

func (g *KafkaGroup) joinReply(req uint64, m *kafkaMember) KafkaJoinReply {
	r := KafkaJoinReply{Req: req, Generation: g.generation, ProtocolType: g.protocolType, Protocol: g.protocol,
		Leader: g.leader, Member: m.id}
	if m.id == g.leader {
		for _, id := range g.order {
			o := g.members[id]
			r.Members = append(r.Members, KafkaJoinMember{ID: o.id, Instance: o.instance, Metadata: o.metadata(g.protocol)})
		}
	}
	return r
}

func (m *kafkaMember) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

func maxMetadata(ps []KafkaProtocol) int {
	n := 0
	for _, p := range ps {
		n = max(n, len(p.Metadata))
	}
	return n
}

// kafkaMemberOverhead bounds a member's field names, timeouts and quotes.
const kafkaMemberOverhead = 256

// cost bounds the member's encoded size with metadata bytes of metadata:
// strings escaped at worst six bytes a byte, bytes in base64.
func (m *kafkaMember) cost(metadata int) int {
	b64 := func(n int) int { return (n + 2) / 3 * 4 }
	return kafkaMemberOverhead + 6*(len(m.id)+len(m.instance)+len(m.clientID)+len(m.host)) +
		b64(metadata) + b64(len(m.assignment))
}

// stateCost is the members' cost but except's.
func (g *KafkaGroup) stateCost(except string) int {
	n := 0
	for id, m := range g.members {
		if id != except {
			n += m.cost(maxMetadata(m.protocols))
		}
	}
	return n
}
