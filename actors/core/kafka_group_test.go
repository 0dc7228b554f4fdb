package core

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// kgh drives one KafkaGroup with explicit times and keeps what it
// answered, checking no request is answered twice.
type kgh struct {
	t        *testing.T
	g        *KafkaGroup
	req      uint64
	joins    map[uint64]KafkaJoinReply
	syncs    map[uint64]KafkaSyncReply
	persist  *KafkaPersist // the last asked for
	barriers int           // barrier persists asked for
	gen      int32         // highest generation seen
}

func kafkaCfg() KafkaGroupConfig {
	c := DefaultKafkaGroupConfig()
	c.InitialDelay = 0
	return c
}

func newKGH(t *testing.T, cfg KafkaGroupConfig) *kgh {
	return &kgh{t: t, g: NewKafkaGroup(cfg), joins: map[uint64]KafkaJoinReply{}, syncs: map[uint64]KafkaSyncReply{}}
}

func (h *kgh) out(o KafkaOutput) {
	h.t.Helper()
	for _, r := range o.Joins {
		if _, dup := h.joins[r.Req]; dup {
			h.t.Fatalf("join request %d answered twice", r.Req)
		}
		h.joins[r.Req] = r
	}
	for _, r := range o.Syncs {
		if _, dup := h.syncs[r.Req]; dup {
			h.t.Fatalf("sync request %d answered twice", r.Req)
		}
		h.syncs[r.Req] = r
	}
	if o.Persist != nil {
		h.persist = o.Persist
		if o.Persist.Barrier {
			h.barriers++
		}
	}
	if g := h.g.Generation(); g < h.gen {
		h.t.Fatalf("generation fell from %d to %d", h.gen, g)
	}
	h.gen = h.g.Generation()
}

var protos = []KafkaProtocol{{Name: "range", Metadata: []byte("sub")}}

func (h *kgh) join(now int64, member, newID string, v4 bool) uint64 {
	h.t.Helper()
	h.req++
	h.out(h.g.Join(now, KafkaJoin{Req: h.req, Member: member, NewMember: newID, ProtocolType: "consumer",
		Protocols: protos, Session: 10 * sec, Rebalance: 20 * sec, RequireKnownMember: v4, ClientID: "c"}))
	return h.req
}

func (h *kgh) sync(now int64, member string, gen int32, as map[string][]byte) uint64 {
	h.t.Helper()
	h.req++
	h.out(h.g.Sync(now, KafkaSync{Req: h.req, Member: member, Generation: gen, Assignments: as}))
	return h.req
}

// durable reports the last persist written.
func (h *kgh) durable(now int64) {
	h.t.Helper()
	h.out(h.g.Persisted(now, h.persist.Seq))
}

func (h *kgh) tick(now int64) KafkaOutput {
	h.t.Helper()
	o := h.g.Tick(now)
	h.out(o)
	return o
}

func (h *kgh) joined(req uint64) KafkaJoinReply {
	h.t.Helper()
	r, ok := h.joins[req]
	if !ok {
		h.t.Fatalf("join request %d not answered", req)
	}
	return r
}

func (h *kgh) waiting(req uint64) {
	h.t.Helper()
	if r, ok := h.joins[req]; ok {
		h.t.Fatalf("join request %d answered early: %+v", req, r)
	}
}

func (h *kgh) state(want KafkaGroupState) {
	h.t.Helper()
	if got := h.g.State(); got != want {
		h.t.Fatalf("state %v, want %v", got, want)
	}
}

// stable takes the group from a completed join phase to Stable: the
// write lands, everyone syncs, the leader last.
func (h *kgh) stable(now int64, reqs map[string]uint64) int32 {
	h.t.Helper()
	h.durable(now)
	var leader string
	var gen int32
	for m, req := range reqs {
		r := h.joined(req)
		if r.Code != KafkaNone || r.Member != m {
			h.t.Fatalf("join of %s: %+v", m, r)
		}
		leader, gen = r.Leader, r.Generation
	}
	as := map[string][]byte{}
	for m := range reqs {
		as[m] = []byte("assigned-" + m)
		if m != leader {
			h.sync(now, m, gen, nil)
		}
	}
	h.sync(now, leader, gen, as)
	h.state(KafkaStable)
	return gen
}

// TestKafkaGroupRebalanceOneToThree: KIP-394's first join, a group of
// one, then two members join: one rebalance, every member answered with
// the new generation, the leader with the members, assignments handed out.
func TestKafkaGroupRebalanceOneToThree(t *testing.T) {
	h := newKGH(t, kafkaCfg())
	r := h.joined(h.join(0, "", "a", true))
	if r.Code != KafkaMemberIDRequired || r.Member != "a" {
		t.Fatalf("first join: %+v", r)
	}
	req := h.join(sec, "a", "", true)
	h.waiting(req) // the join phase ended, but its write did not land yet
	if h.persist == nil || !h.persist.Barrier || h.persist.State.Generation != 1 {
		t.Fatalf("persist %+v", h.persist)
	}
	gen := h.stable(sec, map[string]uint64{"a": req})
	if gen != 1 || h.joined(req).Leader != "a" {
		t.Fatalf("generation %d, reply %+v", gen, h.joined(req))
	}
	rb := h.join(2*sec, "", "b", false)
	h.state(KafkaPreparingRebalance)
	if c := h.g.Heartbeat(2*sec, "a", "", 1); c != KafkaRebalanceInProgress {
		t.Fatalf("heartbeat during the rebalance: %d", c)
	}
	rc := h.join(2*sec, "", "c", false)
	ra := h.join(3*sec, "a", "", false)
	gen = h.stable(3*sec, map[string]uint64{"a": ra, "b": rb, "c": rc})
	if gen != 2 || len(h.joined(ra).Members) != 3 || len(h.joined(rb).Members) != 0 {
		t.Fatalf("generation %d, leader's reply %+v, follower's %+v", gen, h.joined(ra), h.joined(rb))
	}
	for _, m := range []string{"a", "b", "c"} {
		if c := h.g.Heartbeat(4*sec, m, "", 2); c != KafkaNone {
			t.Fatalf("heartbeat of %s: %d", m, c)
		}
	}
	snap := h.g.Snapshot()
	if len(snap.Members) != 3 || string(snap.Members[1].Assignment) != "assigned-b" || string(snap.Members[1].Metadata) != "sub" {
		t.Fatalf("snapshot %+v", snap)
	}
	if h.barriers != 2 {
		t.Fatalf("%d generations written, want 2", h.barriers)
	}
}

// TestKafkaGroupInitialDelay: an empty group's first join phase lasts the
// initial delay, extended by each member joining in it.
func TestKafkaGroupInitialDelay(t *testing.T) {
	cfg := kafkaCfg()
	cfg.InitialDelay = 3 * sec
	h := newKGH(t, cfg)
	ra := h.join(0, "", "a", false)
	rb := h.join(2*sec, "", "b", false)
	h.tick(4 * sec)
	h.waiting(ra)
	if h.barriers != 0 {
		t.Fatal("join phase ended inside the extended delay")
	}
	h.tick(5 * sec)
	h.stable(5*sec, map[string]uint64{"a": ra, "b": rb})
}

func threeStable(t *testing.T) *kgh {
	h := newKGH(t, kafkaCfg())
	ra := h.join(0, "", "a", false)
	h.stable(0, map[string]uint64{"a": ra})
	rb, rc := h.join(0, "", "b", false), h.join(0, "", "c", false)
	ra = h.join(0, "a", "", false)
	h.stable(0, map[string]uint64{"a": ra, "b": rb, "c": rc})
	return h
}

// TestKafkaGroupMemberLeaves: a leave rebalances the rest at once.
func TestKafkaGroupMemberLeaves(t *testing.T) {
	h := threeStable(t)
	codes, o := h.g.Leave(sec, []KafkaLeave{{Member: "b"}, {Member: "zz"}})
	h.out(o)
	if !slices.Equal(codes, []KafkaCode{KafkaNone, KafkaUnknownMemberID}) || o.Rebalance == "" {
		t.Fatalf("leave: %v %+v", codes, o)
	}
	ra, rc := h.join(sec, "a", "", false), h.join(sec, "c", "", false)
	if gen := h.stable(sec, map[string]uint64{"a": ra, "c": rc}); gen != 3 {
		t.Fatalf("generation %d", gen)
	}
	if c := h.g.Heartbeat(sec, "b", "", 3); c != KafkaUnknownMemberID {
		t.Fatalf("heartbeat of the member that left: %d", c)
	}
	// The last members leave: the group empties at a new generation.
	_, o = h.g.Leave(2*sec, []KafkaLeave{{Member: "a"}, {Member: "c"}})
	h.out(o)
	h.state(KafkaEmpty)
	if h.g.Generation() != 4 || !h.g.Idle() {
		t.Fatalf("generation %d idle %v", h.g.Generation(), h.g.Idle())
	}
}

// TestKafkaGroupSessionExpiry: a member silent for its session is
// removed and the rest rebalance; one waiting in SyncGroup is not silent.
func TestKafkaGroupSessionExpiry(t *testing.T) {
	h := newKGH(t, kafkaCfg())
	ra, rb := h.join(0, "", "a", false), h.join(0, "", "b", false)
	gen := h.stable(0, map[string]uint64{"a": ra, "b": rb})
	for now := sec; now < 10*sec; now += sec {
		if c := h.g.Heartbeat(now, "a", "", gen); c != KafkaNone {
			t.Fatalf("heartbeat: %d", c)
		}
		if o := h.tick(now); len(o.Removed) != 0 {
			t.Fatalf("removed early at %d: %+v", now, o.Removed)
		}
	}
	o := h.tick(10 * sec)
	if len(o.Removed) != 1 || o.Removed[0].Member != "b" || o.Rebalance == "" {
		t.Fatalf("expiry: %+v", o)
	}
	ra = h.join(11*sec, "a", "", false)
	h.durable(11 * sec)
	r := h.joined(ra)
	if r.Generation != gen+1 || len(r.Members) != 1 {
		t.Fatalf("rejoin: %+v", r)
	}
	// a waits in SyncGroup (it is the leader here, so: a follower case).
	h2 := newKGH(t, kafkaCfg())
	ra, rb = h2.join(0, "", "a", false), h2.join(0, "", "b", false)
	h2.durable(0)
	follower := "b"
	if h2.joined(ra).Leader == "b" {
		follower = "a"
	}
	h2.sync(0, follower, h2.joined(ra).Generation, nil)
	o = h2.tick(15 * sec)
	if len(o.Removed) != 1 || o.Removed[0].Member == follower {
		t.Fatalf("the silent leader should go, not the waiting follower: %+v", o.Removed)
	}
}

// TestKafkaGroupStaleGenerationFenced: a member of an older generation,
// or one removed, can neither heartbeat, sync nor commit; commits wait
// out the hand-out of assignments; a simple commit needs an empty group.
func TestKafkaGroupStaleGenerationFenced(t *testing.T) {
	h := threeStable(t) // generation 2
	if c := h.g.Commit(sec, "a", "", 1); c != KafkaIllegalGeneration {
		t.Fatalf("commit at an old generation: %d", c)
	}
	if c := h.g.Heartbeat(sec, "a", "", 1); c != KafkaIllegalGeneration {
		t.Fatalf("heartbeat at an old generation: %d", c)
	}
	if c := h.g.Commit(sec, "zz", "", 2); c != KafkaUnknownMemberID {
		t.Fatalf("commit of an unknown member: %d", c)
	}
	if c := h.g.Commit(sec, "", "", -1); c != KafkaUnknownMemberID {
		t.Fatalf("simple commit to a live group: %d", c)
	}
	if c := h.g.Commit(sec, "b", "", 2); c != KafkaNone {
		t.Fatalf("commit: %d", c)
	}
	r := h.sync(sec, "b", 1, nil)
	if h.syncs[r].Code != KafkaIllegalGeneration {
		t.Fatalf("sync at an old generation: %+v", h.syncs[r])
	}
	// A rebalance: commits at the current generation still go (members
	// commit before they rejoin) until the join phase ends.
	h.join(sec, "", "d", false)
	if c := h.g.Commit(sec, "b", "", 2); c != KafkaNone {
		t.Fatalf("commit while preparing: %d", c)
	}
	ra, rb, rc := h.join(sec, "a", "", false), h.join(sec, "b", "", false), h.join(sec, "c", "", false)
	_ = []uint64{ra, rb, rc}
	h.state(KafkaCompletingRebalance)
	if c := h.g.Commit(sec, "b", "", 3); c != KafkaRebalanceInProgress {
		t.Fatalf("commit while completing: %d", c)
	}
	if c := h.g.Commit(sec, "b", "", 2); c != KafkaRebalanceInProgress {
		t.Fatalf("commit at the old generation while completing: %d", c)
	}
	e := newKGH(t, kafkaCfg())
	if c := e.g.Commit(0, "", "", -1); c != KafkaNone {
		t.Fatalf("simple commit to an empty group: %d", c)
	}
	if c := e.g.Commit(0, "x", "", 0); c != KafkaUnknownMemberID {
		t.Fatalf("member commit to an empty group: %d", c)
	}
}

// TestKafkaGroupLoadRebalancesOnce: a successor loading the group does
// not take the generation's heartbeats as healthy, accepts its members'
// commits until the join phase ends, and moves to the next generation
// in one rebalance; a member that died with the old coordinator goes
// after its session.
func TestKafkaGroupLoadRebalancesOnce(t *testing.T) {
	old := threeStable(t)
	snap := old.g.Snapshot() // generation 2: a, b, c
	h := &kgh{t: t, joins: map[uint64]KafkaJoinReply{}, syncs: map[uint64]KafkaSyncReply{}, req: 100}
	now := 1000 * sec
	h.g = LoadKafkaGroup(kafkaCfg(), snap, now)
	h.gen = 2
	h.state(KafkaPreparingRebalance)
	if c := h.g.Heartbeat(now, "a", "", 2); c != KafkaRebalanceInProgress {
		t.Fatalf("heartbeat after the load: %d", c)
	}
	if c := h.g.Commit(now, "b", "", 2); c != KafkaNone {
		t.Fatalf("commit of the loaded generation: %d", c)
	}
	if c := h.g.Commit(now, "b", "", 1); c != KafkaIllegalGeneration {
		t.Fatalf("commit of an older generation: %d", c)
	}
	// c died with the old coordinator: it never comes back.
	ra := h.join(now+sec, "a", "", false)
	rb := h.join(now+2*sec, "b", "", false)
	h.tick(now + 9*sec)
	h.waiting(ra)
	h.g.Heartbeat(now+9*sec, "a", "", 2) // waiting in JoinGroup: no heartbeat needed, one is harmless
	o := h.tick(now + 10*sec)
	if len(o.Removed) != 1 || o.Removed[0].Member != "c" {
		t.Fatalf("removed %+v", o.Removed)
	}
	if gen := h.stable(now+10*sec, map[string]uint64{"a": ra, "b": rb}); gen != 3 {
		t.Fatalf("generation %d", gen)
	}
	if h.barriers != 1 {
		t.Fatalf("%d rebalances after the load, want 1", h.barriers)
	}
	if c := h.g.Heartbeat(now+11*sec, "a", "", 3); c != KafkaNone {
		t.Fatalf("heartbeat after the rebalance: %d", c)
	}
	if c := h.g.Commit(now+11*sec, "a", "", 2); c != KafkaIllegalGeneration {
		t.Fatalf("commit of the loaded generation after the rebalance: %d", c)
	}
	empty := LoadKafkaGroup(kafkaCfg(), KafkaSnapshot{Generation: 7, State: KafkaEmpty}, now)
	if empty.State() != KafkaEmpty || empty.Generation() != 7 {
		t.Fatalf("loaded empty group: %v %d", empty.State(), empty.Generation())
	}
}

// TestKafkaGroupStallExpiresNobody: while a new generation waits for its
// write, past every session and rebalance timeout, nobody is removed;
// sessions restart when the replies go out.
func TestKafkaGroupStallExpiresNobody(t *testing.T) {
	h := newKGH(t, kafkaCfg())
	ra, rb := h.join(0, "", "a", false), h.join(0, "", "b", false)
	h.stable(0, map[string]uint64{"a": ra, "b": rb})
	ra, rb = h.join(sec, "a", "", false), h.join(sec, "b", "", false)
	h.state(KafkaCompletingRebalance)
	for now := 2 * sec; now <= 60*sec; now += sec {
		if o := h.tick(now); len(o.Removed) != 0 || len(o.Joins) != 0 {
			t.Fatalf("during the stall at %ds: %+v", now/sec, o)
		}
	}
	// A client retries its join meanwhile: its reply follows the retry.
	ra2 := h.join(30*sec, "a", "", false)
	h.durable(60 * sec)
	h.joined(ra2)
	h.joined(rb)
	if _, ok := h.joins[ra]; ok {
		t.Fatal("the abandoned join request was answered")
	}
	if o := h.tick(69 * sec); len(o.Removed) != 0 {
		t.Fatalf("a session ran during the stall: %+v", o.Removed)
	}
	if o := h.tick(70 * sec); len(o.Removed) != 2 {
		t.Fatalf("silent members after the stall: %+v", o.Removed)
	}
}

// TestKafkaGroupRejoinAbandonsUnwrittenGeneration: a member joining while
// a generation waits for its write starts the next one; the waiting
// members are answered once, at the newer generation.
func TestKafkaGroupRejoinAbandonsUnwrittenGeneration(t *testing.T) {
	h := newKGH(t, kafkaCfg())
	ra := h.join(0, "", "a", false)
	first := h.persist.Seq
	rc := h.join(sec, "", "c", false)
	h.state(KafkaCompletingRebalance) // a and c both waiting: generation 2 at once
	h.out(h.g.Persisted(sec, first))  // generation 1's write lands late: nothing
	h.waiting(ra)
	h.durable(2 * sec)
	if r := h.joined(ra); r.Generation != 2 || h.joined(rc).Generation != 2 {
		t.Fatalf("replies %+v %+v", r, h.joined(rc))
	}
}

// TestKafkaGroupLimits: sessions out of bounds, mismatched protocols, a
// full group, oversized metadata and assignments.
func TestKafkaGroupLimits(t *testing.T) {
	cfg := kafkaCfg()
	cfg.MaxMembers = 2
	h := newKGH(t, cfg)
	h.req++
	o := h.g.Join(0, KafkaJoin{Req: h.req, NewMember: "x", ProtocolType: "consumer", Protocols: protos, Session: sec})
	if o.Joins[0].Code != KafkaInvalidSessionTimeout {
		t.Fatalf("short session: %+v", o.Joins)
	}
	ra := h.join(0, "", "a", false)
	h.stable(0, map[string]uint64{"a": ra})
	for _, j := range []KafkaJoin{
		{NewMember: "x", ProtocolType: "connect", Protocols: protos},
		{NewMember: "x", ProtocolType: "consumer", Protocols: []KafkaProtocol{{Name: "sticky"}}},
		{NewMember: "x", ProtocolType: "consumer"},
	} {
		j.Session, j.Req = 10*sec, 1000
		if o := h.g.Join(sec, j); o.Joins[0].Code != KafkaInconsistentGroupProtocol {
			t.Fatalf("join %+v: %+v", j, o.Joins)
		}
	}
	big := KafkaJoin{Req: 1001, NewMember: "x", ProtocolType: "consumer", Session: 10 * sec,
		Protocols: []KafkaProtocol{{Name: "range", Metadata: make([]byte, cfg.MaxMemberData+1)}}}
	if o := h.g.Join(sec, big); o.Joins[0].Code != KafkaInvalidRequest {
		t.Fatalf("oversized metadata: %+v", o.Joins)
	}
	h.join(sec, "", "b", false)
	if r := h.joined(h.join(sec, "", "c", false)); r.Code != KafkaGroupMaxSizeReached {
		t.Fatalf("third member: %+v", r)
	}
	// The leader's assignment too large to store: every sync fails, the
	// group rebalances.
	ra, rb := h.join(sec, "a", "", false), h.req
	h.durable(sec)
	leader := h.joined(ra).Leader
	follower := map[string]string{"a": "b", "b": "a"}[leader]
	fs := h.sync(sec, follower, 2, nil)
	ls := h.sync(sec, leader, 2, map[string][]byte{"a": make([]byte, cfg.MaxMemberData+1)})
	if h.syncs[fs].Code != KafkaUnknownServerError || h.syncs[ls].Code != KafkaUnknownServerError {
		t.Fatalf("syncs %+v %+v", h.syncs[fs], h.syncs[ls])
	}
	h.state(KafkaPreparingRebalance)
	_ = rb
}

// TestKafkaGroupStaticMembers: an instance id is fenced against other
// member ids, and a new member with it replaces the old one.
func TestKafkaGroupStaticMembers(t *testing.T) {
	h := newKGH(t, kafkaCfg())
	h.req++
	j := KafkaJoin{Req: h.req, NewMember: "a", Instance: "i1", ProtocolType: "consumer", Protocols: protos,
		Session: 10 * sec, RequireKnownMember: true}
	h.out(h.g.Join(0, j)) // static: no MEMBER_ID_REQUIRED round trip
	h.stable(0, map[string]uint64{"a": h.req})
	if c := h.g.Heartbeat(sec, "zz", "i1", 1); c != KafkaFencedInstanceID {
		t.Fatalf("another member id with the instance id: %d", c)
	}
	h.req++
	j.Req, j.NewMember = h.req, "a2"
	o := h.g.Join(2*sec, j) // the instance restarted: the new member replaces a
	h.out(o)
	if len(o.Removed) != 1 || o.Removed[0].Member != "a" {
		t.Fatalf("replacement: %+v", o)
	}
	h.durable(2 * sec)
	if r := h.joined(h.req); r.Member != "a2" || r.Generation != 2 {
		t.Fatalf("reply %+v", r)
	}
	codes, _ := h.g.Leave(3*sec, []KafkaLeave{{Instance: "i1"}})
	if codes[0] != KafkaNone || !h.g.Idle() && h.g.State() != KafkaEmpty {
		t.Fatalf("leave by instance id: %v, state %v", codes, h.g.State())
	}
}

// TestKafkaGroupPendingMemberLapses: an id handed out and never used
// holds a join phase back only until its session passes.
func TestKafkaGroupPendingMemberLapses(t *testing.T) {
	h := newKGH(t, kafkaCfg())
	ra, rb := h.join(0, "", "a", false), h.join(0, "", "b", false)
	gen := h.stable(0, map[string]uint64{"a": ra, "b": rb})
	h.join(sec, "", "p", true) // MEMBER_ID_REQUIRED, and p never comes back
	_, o := h.g.Leave(sec, []KafkaLeave{{Member: "b"}})
	h.out(o)
	ra = h.join(2*sec, "a", "", false)
	h.tick(10 * sec)
	h.waiting(ra)
	h.tick(11 * sec)
	h.durable(11 * sec)
	if r := h.joined(ra); r.Generation != gen+1 || len(r.Members) != 1 {
		t.Fatalf("reply %+v", r)
	}
}

// TestKafkaGroupRandomOps drives a group with random inputs: generations
// only rise, no request is answered twice, and the states keep their
// invariants.
func TestKafkaGroupRandomOps(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			h := newKGH(t, kafkaCfg())
			now := int64(0)
			seen := map[KafkaGroupState]int{}
			for step := 0; step < 400; step++ {
				now += rng.Int64N(3 * sec)
				ids := append(slices.Clone(h.g.order), "zz") // the members, and a stranger
				for id := range h.g.pending {
					ids = append(ids, id)
				}
				m := ids[rng.IntN(len(ids))]
				gen := h.g.Generation() - int32(rng.IntN(2))
				switch rng.IntN(7) {
				case 0:
					h.join(now, "", fmt.Sprint("m", step), rng.IntN(2) == 0)
				case 1:
					h.join(now, m, "", false)
				case 2:
					h.sync(now, m, gen, map[string][]byte{m: []byte("x")})
				case 3:
					h.g.Heartbeat(now, m, "", gen)
				case 4:
					_, o := h.g.Leave(now, []KafkaLeave{{Member: m}})
					h.out(o)
				case 5:
					if h.persist != nil {
						h.durable(now)
					}
				default:
					h.tick(now)
				}
				checkKafkaInvariants(t, h.g)
				seen[h.g.State()]++
			}
			if seed == 1 {
				t.Logf("states visited: %v", seen)
			}
		})
	}
}

func checkKafkaInvariants(t *testing.T, g *KafkaGroup) {
	t.Helper()
	s := g.Snapshot()
	switch {
	case s.State == KafkaEmpty && len(s.Members) > 0:
		t.Fatalf("empty with members: %+v", s)
	case (s.State == KafkaStable || s.State == KafkaCompletingRebalance) && g.members[s.Leader] == nil:
		t.Fatalf("%v without a leader: %+v", s.State, s)
	case len(g.order) != len(g.members):
		t.Fatalf("order %v, members %d", g.order, len(g.members))
	case g.holding && g.state != KafkaCompletingRebalance:
		t.Fatalf("holding replies in %v", g.state)
	}
}

func TestKafkaGroupDeleteAndHelpers(t *testing.T) {
	h := newKGH(t, kafkaCfg())
	ra := h.join(0, "", "a", false)
	h.stable(0, map[string]uint64{"a": ra})
	if c := h.g.Delete(); c != KafkaNonEmptyGroup {
		t.Fatalf("delete a live group: %d", c)
	}
	_, o := h.g.Leave(sec, []KafkaLeave{{Member: "a"}})
	h.out(o)
	if c := h.g.Delete(); c != KafkaNone || h.g.State() != KafkaDead {
		t.Fatalf("delete: %d %v", c, h.g.State())
	}
	if c := h.g.Heartbeat(sec, "a", "", 2); c != KafkaCoordinatorNotAvailable {
		t.Fatalf("heartbeat to a dead group: %d", c)
	}
	if c := h.g.Delete(); c != KafkaGroupIDNotFound {
		t.Fatalf("second delete: %d", c)
	}
	for s := KafkaEmpty; s <= KafkaDead; s++ {
		if back, ok := ParseKafkaGroupState(s.String()); !ok || back != s {
			t.Fatalf("state %v parses to %v", s, back)
		}
	}
	if _, ok := ParseKafkaGroupState("Assigning"); ok {
		t.Fatal("a KIP-848 state parsed")
	}
	if got := clip("ab\xffcdé", 6); got != "ab?cd" {
		t.Fatalf("clip: %q", got)
	}
}

// TestKafkaGroupLoadMidFirstJoin: a state written while the group's first
// join phase ran (members, no protocol chosen yet) loads as an empty
// group, so new joins are taken instead of being refused as offering no
// protocol the loaded members offer (a drill's two gateways racing for a
// new group refused joins for 30 s).
func TestKafkaGroupLoadMidFirstJoin(t *testing.T) {
	first := newKGH(t, DefaultKafkaGroupConfig()) // with the initial delay: the join phase stays open
	first.join(0, "", "a", false)
	snap := first.g.Snapshot()
	if snap.Protocol != "" || len(snap.Members) != 1 {
		t.Fatalf("snapshot mid-join: protocol %q, %d members", snap.Protocol, len(snap.Members))
	}
	h := &kgh{t: t, joins: map[uint64]KafkaJoinReply{}, syncs: map[uint64]KafkaSyncReply{}, req: 100}
	h.g = LoadKafkaGroup(kafkaCfg(), snap, sec)
	if h.g.State() != KafkaEmpty || h.g.Generation() != 0 {
		t.Fatalf("loaded mid-first-join as %v, want empty", h.g.State())
	}
	rb := h.join(sec, "", "b", false)
	if r, ok := h.joins[rb]; ok && r.Code != KafkaNone {
		t.Fatalf("join after the load refused with %d", r.Code)
	}
}
