package kafka

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/scenarios/testkit"
)

// fakeKV is the groups bucket in memory: compare-and-set on revisions,
// records encoded and decoded as meta.Store does (so every write is
// validated), stalls and failures on demand.
type fakeKV struct {
	mu     sync.Mutex
	recs   map[string][]byte
	revs   map[string]uint64
	rev    uint64
	native map[string]bool
	stall  chan struct{} // non-nil: every call waits for it to close
	fail   error         // non-nil: every call fails with it
	failed int           // calls failed so far
	writes []meta.KafkaGroup
}

var errKVDown = errors.New("kv down")

func newFakeKV() *fakeKV {
	return &fakeKV{recs: map[string][]byte{}, revs: map[string]uint64{}, native: map[string]bool{}}
}

func (f *fakeKV) enter(ctx context.Context) error {
	f.mu.Lock()
	stall, fail := f.stall, f.fail
	f.mu.Unlock()
	if stall != nil {
		select {
		case <-stall:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		f.mu.Lock()
		f.failed++
		f.mu.Unlock()
	}
	return fail
}

func (f *fakeKV) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func (f *fakeKV) setStall(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case on && f.stall == nil:
		f.stall = make(chan struct{})
	case !on && f.stall != nil:
		close(f.stall)
		f.stall = nil
	}
}

func (f *fakeKV) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeKV) KafkaGroup(ctx context.Context, name string) (meta.KafkaGroup, uint64, error) {
	if err := f.enter(ctx); err != nil {
		return meta.KafkaGroup{}, 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.recs[name]
	if !ok {
		return meta.KafkaGroup{}, 0, nil
	}
	g, err := meta.DecodeKafkaGroup(b)
	return g, f.revs[name], err
}

func (f *fakeKV) PutKafkaGroup(ctx context.Context, g *meta.KafkaGroup, rev uint64) (uint64, error) {
	if err := f.enter(ctx); err != nil {
		return 0, err
	}
	b, err := meta.EncodeKafkaGroup(g)
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.revs[g.Name] != rev {
		return 0, meta.ErrFenced
	}
	f.rev++
	f.recs[g.Name], f.revs[g.Name] = b, f.rev
	dec, _ := meta.DecodeKafkaGroup(b)
	f.writes = append(f.writes, dec)
	return f.rev, nil
}

func (f *fakeKV) DeleteKafkaGroup(ctx context.Context, name string, rev uint64) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.revs[name] != rev {
		return meta.ErrFenced
	}
	delete(f.recs, name)
	delete(f.revs, name)
	return nil
}

func (f *fakeKV) KafkaGroups(ctx context.Context) ([]meta.KafkaGroup, error) {
	if err := f.enter(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []meta.KafkaGroup
	for _, b := range f.recs {
		g, _ := meta.DecodeKafkaGroup(b)
		out = append(out, g)
	}
	return out, nil
}

func (f *fakeKV) NativeGroupExists(ctx context.Context, name string) (bool, error) {
	if err := f.enter(ctx); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.native[name], nil
}

// stored is group's record as it stands (rev 0: none).
func (f *fakeKV) stored(name string) (meta.KafkaGroup, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, _ := meta.DecodeKafkaGroup(f.recs[name])
	return g, f.revs[name]
}

// put writes a record as another gateway would.
func (f *fakeKV) put(t *testing.T, g meta.KafkaGroup) {
	t.Helper()
	_, rev := f.stored(g.Name)
	if _, err := f.PutKafkaGroup(context.Background(), &g, rev); err != nil {
		t.Fatal(err)
	}
}

func leakCheck(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// ours is a settable IsCoordinator.
type ours struct {
	mu  sync.Mutex
	not map[string]bool
}

func (o *ours) is(group string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.not[group]
}

func (o *ours) set(group string, mine bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.not == nil {
		o.not = map[string]bool{}
	}
	o.not[group] = !mine
}

type rig struct {
	t     *testing.T
	c     *Coordinator
	kv    *fakeKV
	clock *testkit.Clock
	ours  *ours
}

func testLimits() GroupLimits {
	return GroupLimits{InitialDelay: -1, MinSession: time.Second, KVTimeout: time.Minute, DrainTimeout: 10 * time.Second}
}

func newRig(t *testing.T, kv *fakeKV, lim GroupLimits) *rig {
	t.Helper()
	r := &rig{t: t, kv: kv, clock: testkit.NewClock(int64(time.Hour)), ours: &ours{}}
	c, err := NewCoordinator(CoordinatorConfig{KV: kv, IsCoordinator: r.ours.is, Logger: testkit.Logger(t, slog.LevelError),
		Clock: r.clock.Now, Limits: lim, manualTick: true})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	t.Cleanup(func() { _ = c.Close() })
	return r
}

// advance moves the clock and ticks.
func (r *rig) advance(d time.Duration) {
	r.clock.Advance(d)
	r.c.tick()
}

func (r *rig) waiters(group string) int {
	r.c.mu.Lock()
	g := r.c.groups[group]
	r.c.mu.Unlock()
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiters)
}

func joinReq(version int16, group, member string) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version, r.Group, r.MemberID = version, group, member
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = 10000, 20000, "consumer"
	r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte("sub-" + member)}}
	return r
}

// joinAsync sends a JoinGroup and waits until it waits in the core.
func (r *rig) joinAsync(group, member string) <-chan *kmsg.JoinGroupResponse {
	r.t.Helper()
	n := r.waiters(group)
	ch := make(chan *kmsg.JoinGroupResponse, 1)
	version := int16(5)
	if member == "" {
		version = 3 // no MEMBER_ID_REQUIRED round trip
	}
	go func() { ch <- r.c.JoinGroup(context.Background(), joinReq(version, group, member)) }()
	testkit.WaitFor(r.t, "the join to wait", func() bool { return r.waiters(group) > n })
	return ch
}

// joinNew joins a new member through KIP-394's round trip.
func (r *rig) joinNew(group string) *kmsg.JoinGroupResponse {
	r.t.Helper()
	first := r.c.JoinGroup(context.Background(), joinReq(9, group, ""))
	if first.ErrorCode != kerr.MemberIDRequired.Code || first.MemberID == "" {
		r.t.Fatalf("first join: %+v", first)
	}
	return r.c.JoinGroup(context.Background(), joinReq(9, group, first.MemberID))
}

func (r *rig) sync(group, member string, gen int32, plan map[string]string) *kmsg.SyncGroupResponse {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 5, group, member, gen
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	for m, a := range plan {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m, MemberAssignment: []byte(a)})
	}
	return r.c.SyncGroup(context.Background(), req)
}

func (r *rig) heartbeat(group, member string, gen int32) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 4, group, member, gen
	return r.c.Heartbeat(context.Background(), req).ErrorCode
}

func (r *rig) commit(group, member string, gen int32, topic string, part int32, off int64) int16 {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 8, group, member, gen
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = part, off
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{p}}}
	return r.c.OffsetCommit(context.Background(), req).Topics[0].Partitions[0].ErrorCode
}

// commitAsync sends a commit and waits until it waits for its write.
func (r *rig) commitAsync(group, member string, gen int32, topic string, part int32, off int64) <-chan int16 {
	r.t.Helper()
	n := r.commitWaiters(group)
	ch := make(chan int16, 1)
	go func() { ch <- r.commit(group, member, gen, topic, part, off) }()
	testkit.WaitFor(r.t, "the commit to wait for its write", func() bool { return r.commitWaiters(group) > n })
	return ch
}

// commitWaiters counts the OffsetCommits waiting for a write.
func (r *rig) commitWaiters(group string) int {
	r.c.mu.Lock()
	g := r.c.groups[group]
	r.c.mu.Unlock()
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.commits) + len(g.flight)
}

// fetch reads one committed offset (OffsetFetch v8).
func (r *rig) fetch(group, topic string, part int32) (int64, int16) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: group, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{part}}}}}
	g := r.c.OffsetFetch(context.Background(), req).Groups[0]
	if g.ErrorCode != 0 {
		return -1, g.ErrorCode
	}
	return g.Topics[0].Partitions[0].Offset, 0
}

// stable brings a one-member group to Stable and returns its member id.
func (r *rig) stable(group string) (string, int32) {
	r.t.Helper()
	j := r.joinNew(group)
	if j.ErrorCode != 0 || j.LeaderID != j.MemberID {
		r.t.Fatalf("join: %+v", j)
	}
	if s := r.sync(group, j.MemberID, j.Generation, map[string]string{j.MemberID: "p0"}); s.ErrorCode != 0 {
		r.t.Fatalf("sync: %+v", s)
	}
	return j.MemberID, j.Generation
}

// TestKafkaCodesMatchKerr: the core's codes are Kafka's.
func TestKafkaCodesMatchKerr(t *testing.T) {
	for c, e := range map[core.KafkaCode]*kerr.Error{core.KafkaUnknownServerError: kerr.UnknownServerError,
		core.KafkaOffsetMetadataTooLarge: kerr.OffsetMetadataTooLarge, core.KafkaCoordinatorLoadInProgress: kerr.CoordinatorLoadInProgress,
		core.KafkaCoordinatorNotAvailable: kerr.CoordinatorNotAvailable, core.KafkaNotCoordinator: kerr.NotCoordinator,
		core.KafkaIllegalGeneration: kerr.IllegalGeneration, core.KafkaInconsistentGroupProtocol: kerr.InconsistentGroupProtocol,
		core.KafkaInvalidGroupID: kerr.InvalidGroupID, core.KafkaUnknownMemberID: kerr.UnknownMemberID,
		core.KafkaInvalidSessionTimeout: kerr.InvalidSessionTimeout, core.KafkaRebalanceInProgress: kerr.RebalanceInProgress,
		core.KafkaInvalidRequest: kerr.InvalidRequest, core.KafkaNonEmptyGroup: kerr.NonEmptyGroup,
		core.KafkaGroupIDNotFound: kerr.GroupIDNotFound, core.KafkaMemberIDRequired: kerr.MemberIDRequired,
		core.KafkaGroupMaxSizeReached: kerr.GroupMaxSizeReached, core.KafkaFencedInstanceID: kerr.FencedInstanceID} {
		if int16(c) != e.Code {
			t.Errorf("%s: core has %d, Kafka %d", e.Message, c, e.Code)
		}
	}
	for key, v := range CoordinatorVersions {
		if req := kmsg.RequestForKey(key.Int16()); req == nil || v[1] > req.MaxVersion() || v[0] < 0 {
			t.Errorf("%s: versions %v", key.Name(), v)
		}
	}
}

// TestCoordinatorOneMember: join (KIP-394), sync, heartbeat, commit,
// fetch, describe, list, leave; the record follows.
func TestCoordinatorOneMember(t *testing.T) {
	leakCheck(t)
	r := newRig(t, newFakeKV(), testLimits())
	m, gen := r.stable("app")
	if rec, _ := r.kv.stored("app"); rec.Generation != gen || len(rec.Members) != 1 {
		t.Fatalf("record after the join: %+v", rec)
	}
	if c := r.heartbeat("app", m, gen); c != 0 {
		t.Fatalf("heartbeat: %d", c)
	}
	if c := r.commit("app", m, gen, "orders", 3, 42); c != 0 {
		t.Fatalf("commit: %d", c)
	}
	if off, c := r.fetch("app", "orders", 3); off != 42 || c != 0 {
		t.Fatalf("fetch: %d %d", off, c)
	}
	testkit.WaitFor(t, "the commit to be written", func() bool {
		r.advance(100 * time.Millisecond)
		rec, _ := r.kv.stored("app")
		return rec.Offsets["orders"][3].Offset == 42 && rec.State == "Stable" && string(rec.Members[0].Assignment) == "p0"
	})
	d := kmsg.NewPtrDescribeGroupsRequest()
	d.Version, d.Groups = 5, []string{"app", "nobody"}
	dr := r.c.DescribeGroups(context.Background(), d)
	if g := dr.Groups[0]; g.State != "Stable" || g.Protocol != "range" || len(g.Members) != 1 || string(g.Members[0].MemberAssignment) != "p0" {
		t.Fatalf("describe: %+v", g)
	}
	if g := dr.Groups[1]; g.State != "Dead" || g.ErrorCode != 0 {
		t.Fatalf("describe an absent group: %+v", g)
	}
	l := kmsg.NewPtrListGroupsRequest()
	l.Version = 5
	if lr := r.c.ListGroups(context.Background(), l); len(lr.Groups) != 1 || lr.Groups[0].GroupState != "Stable" {
		t.Fatalf("list: %+v", lr)
	}
	lv := kmsg.NewPtrLeaveGroupRequest()
	lv.Version, lv.Group = 5, "app"
	lv.Members = []kmsg.LeaveGroupRequestMember{{MemberID: m}, {MemberID: "zz"}}
	if lr := r.c.LeaveGroup(context.Background(), lv); lr.Members[0].ErrorCode != 0 || lr.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("leave: %+v", lr)
	}
	testkit.WaitFor(t, "the empty group to be written", func() bool {
		r.advance(100 * time.Millisecond)
		rec, _ := r.kv.stored("app")
		return rec.State == "Empty" && rec.Generation == gen+1 && rec.Offsets["orders"][3].Offset == 42
	})
}

// TestCoordinatorRebalanceThree: two members join a Stable group of one;
// every member waits in JoinGroup for the new generation, the followers
// in SyncGroup for the leader's plan.
func TestCoordinatorRebalanceThree(t *testing.T) {
	leakCheck(t)
	r := newRig(t, newFakeKV(), testLimits())
	a, gen := r.stable("app")
	jb, jc := r.joinAsync("app", ""), r.joinAsync("app", "")
	if c := r.heartbeat("app", a, gen); c != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat during the rebalance: %d", c)
	}
	ra := r.c.JoinGroup(context.Background(), joinReq(5, "app", a)) // the last one: the phase ends
	rb, rc := <-jb, <-jc
	for _, j := range []*kmsg.JoinGroupResponse{ra, rb, rc} {
		if j.ErrorCode != 0 || j.Generation != gen+1 || j.LeaderID != a {
			t.Fatalf("join: %+v", j)
		}
	}
	if len(ra.Members) != 3 || len(rb.Members) != 0 {
		t.Fatalf("members: leader %d, follower %d", len(ra.Members), len(rb.Members))
	}
	sb := make(chan *kmsg.SyncGroupResponse, 1)
	go func() { sb <- r.sync("app", rb.MemberID, gen+1, nil) }()
	testkit.WaitFor(t, "the follower's sync to wait", func() bool { return r.waiters("app") == 1 })
	plan := map[string]string{a: "pa", rb.MemberID: "pb", rc.MemberID: "pc"}
	if s := r.sync("app", a, gen+1, plan); s.ErrorCode != 0 || string(s.MemberAssignment) != "pa" {
		t.Fatalf("leader's sync: %+v", s)
	}
	if s := <-sb; s.ErrorCode != 0 || string(s.MemberAssignment) != "pb" {
		t.Fatalf("follower's sync: %+v", s)
	}
	if s := r.sync("app", rc.MemberID, gen+1, nil); string(s.MemberAssignment) != "pc" {
		t.Fatalf("late sync: %+v", s)
	}
	if c := r.commit("app", a, gen, "orders", 0, 1); c != kerr.IllegalGeneration.Code {
		t.Fatalf("commit at the old generation: %d", c)
	}
}

// TestCoordinatorKVStall: with the KV stalled, heartbeats and fetches are
// answered from memory, no session expires and no rebalance starts; a
// commit waits for its write (written through), and a rebalance that
// starts meanwhile for the new generation's; everything is written and
// answered once the KV is back.
func TestCoordinatorKVStall(t *testing.T) {
	leakCheck(t)
	r := newRig(t, newFakeKV(), testLimits())
	a, gen := r.stable("app")
	if c := r.commit("app", a, gen, "orders", 0, 1); c != 0 {
		t.Fatalf("commit: %d", c)
	}
	r.kv.setStall(true)
	committed := r.commitAsync("app", a, gen, "orders", 0, 59)
	for i := range 60 {
		if c := r.heartbeat("app", a, gen); c != 0 {
			t.Fatalf("heartbeat %d during the stall: %d", i, c)
		}
		r.advance(time.Second) // 60 s: six sessions
	}
	if off, _ := r.fetch("app", "orders", 0); off != 1 {
		t.Fatalf("fetch during the stall: %d (the commit waiting for its write is acknowledged to no one)", off)
	}
	select {
	case c := <-committed:
		t.Fatalf("commit answered (%d) before it was written", c)
	default:
	}
	jb := r.joinAsync("app", "") // a new member: a rebalance, waiting on the KV
	ja := r.joinAsync("app", a)
	for range 60 {
		r.advance(time.Second)
	}
	if r.waiters("app") != 2 {
		t.Fatal("a join was answered before its generation was written")
	}
	r.kv.setStall(false)
	testkit.WaitFor(t, "the generation's write", func() bool { return r.waiters("app") == 0 })
	if j := <-ja; j.ErrorCode != 0 || j.Generation != gen+1 || len(j.Members) != 2 {
		t.Fatalf("the old member's join: %+v", j)
	}
	if j := <-jb; j.ErrorCode != 0 || j.Generation != gen+1 {
		t.Fatalf("the new member's join: %+v", j)
	}
	if c := <-committed; c != 0 {
		t.Fatalf("commit once the KV is back: %d", c)
	}
	if rec, _ := r.kv.stored("app"); rec.Offsets["orders"][0].Offset != 59 || rec.Generation != gen+1 {
		t.Fatalf("record: %+v", rec)
	}
	if off, _ := r.fetch("app", "orders", 0); off != 59 {
		t.Fatalf("fetch: %d", off)
	}
}

// TestCoordinatorKVFailuresRetried: failing writes are retried with
// backoff (re-reading the record first: a failed write may have been
// applied); the commits waiting on them are answered once written.
func TestCoordinatorKVFailuresRetried(t *testing.T) {
	leakCheck(t)
	r := newRig(t, newFakeKV(), testLimits())
	a, gen := r.stable("app")
	r.kv.setFail(errKVDown)
	var waiting []<-chan int16
	for i := range 10 {
		waiting = append(waiting, r.commitAsync("app", a, gen, "orders", int32(i), 7))
	}
	testkit.WaitFor(t, "writes to fail", func() bool { r.advance(time.Second); return r.kv.failures() >= 3 })
	r.kv.setFail(nil)
	testkit.WaitFor(t, "the retried write", func() bool {
		r.advance(time.Second)
		rec, _ := r.kv.stored("app")
		return len(rec.Offsets["orders"]) == 10
	})
	for i, ch := range waiting {
		if c := <-ch; c != 0 {
			t.Fatalf("commit %d: %d", i, c)
		}
	}
}

// TestCoordinatorLoadFailure: a group whose record cannot be read gets
// COORDINATOR_LOAD_IN_PROGRESS (clients retry); it loads once the KV
// answers.
func TestCoordinatorLoadFailure(t *testing.T) {
	leakCheck(t)
	r := newRig(t, newFakeKV(), testLimits())
	r.kv.setFail(errKVDown)
	if j := r.c.JoinGroup(context.Background(), joinReq(9, "app", "")); j.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("join with the KV down: %+v", j)
	}
	r.kv.setFail(nil)
	r.stable("app")
}

// TestCoordinatorNotCoordinator: requests for a group another gateway
// coordinates get NOT_COORDINATOR; a group held here that moves away is
// flushed, its waiting requests answered, and dropped.
func TestCoordinatorNotCoordinator(t *testing.T) {
	leakCheck(t)
	r := newRig(t, newFakeKV(), testLimits())
	r.ours.set("elsewhere", false)
	if j := r.c.JoinGroup(context.Background(), joinReq(9, "elsewhere", "")); j.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("join: %+v", j)
	}
	if c := r.heartbeat("elsewhere", "m", 1); c != kerr.NotCoordinator.Code {
		t.Fatalf("heartbeat: %d", c)
	}
	if _, c := r.fetch("elsewhere", "orders", 0); c != kerr.NotCoordinator.Code {
		t.Fatalf("fetch: %d", c)
	}
	a, gen := r.stable("app")
	r.commit("app", a, gen, "orders", 0, 5)
	jb := r.joinAsync("app", "") // waits: a must rejoin
	r.ours.set("app", false)
	r.c.tick()
	if j := <-jb; j.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("a waiting join when the group moved: %+v", j)
	}
	testkit.WaitFor(t, "the group to be flushed and dropped", func() bool {
		r.advance(100 * time.Millisecond)
		r.c.mu.Lock()
		defer r.c.mu.Unlock()
		return r.c.groups["app"] == nil
	})
	if rec, _ := r.kv.stored("app"); rec.Offsets["orders"][0].Offset != 5 {
		t.Fatalf("commit not flushed: %+v", rec)
	}
}

// TestCoordinatorNativeName: a name a native raidq group holds is refused.
func TestCoordinatorNativeName(t *testing.T) {
	leakCheck(t)
	kv := newFakeKV()
	kv.native["shared"] = true
	r := newRig(t, kv, testLimits())
	if j := r.c.JoinGroup(context.Background(), joinReq(9, "shared", "")); j.ErrorCode != kerr.InvalidGroupID.Code {
		t.Fatalf("join: %+v", j)
	}
	if c := r.commit("shared", "", -1, "orders", 0, 1); c != kerr.InvalidGroupID.Code {
		t.Fatalf("commit: %d", c)
	}
}

// TestCoordinatorTakeover: a successor loads the group: heartbeats of the
// generation get REBALANCE_IN_PROGRESS, its commits are accepted until
// the members rejoin, and one rebalance follows.
func TestCoordinatorTakeover(t *testing.T) {
	leakCheck(t)
	kv := newFakeKV()
	old := newRig(t, kv, testLimits())
	a, gen := old.stable("app")
	old.commit("app", a, gen, "orders", 0, 10)
	if err := old.c.Close(); err != nil { // flushes
		t.Fatal(err)
	}
	r := newRig(t, kv, testLimits())
	if c := r.heartbeat("app", a, gen); c != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat after the takeover: %d", c)
	}
	if c := r.commit("app", a, gen, "orders", 0, 11); c != 0 {
		t.Fatalf("last commit of the old generation: %d", c)
	}
	kv.mu.Lock() // the write-behind loop may be appending
	writes := len(kv.writes)
	kv.mu.Unlock()
	j := r.c.JoinGroup(context.Background(), joinReq(5, "app", a))
	if j.ErrorCode != 0 || j.Generation != gen+1 {
		t.Fatalf("rejoin: %+v", j)
	}
	if s := r.sync("app", a, j.Generation, map[string]string{a: "p"}); s.ErrorCode != 0 {
		t.Fatalf("sync: %+v", s)
	}
	if c := r.heartbeat("app", a, j.Generation); c != 0 {
		t.Fatalf("heartbeat: %d", c)
	}
	kv.mu.Lock()
	bumps := 0
	for _, w := range kv.writes[writes:] {
		if w.Generation > gen {
			bumps++
		}
	}
	kv.mu.Unlock()
	if bumps != 1 {
		t.Fatalf("%d writes of a new generation, want 1", bumps)
	}
	if off, _ := r.fetch("app", "orders", 0); off != 11 {
		t.Fatalf("offset %d", off)
	}
}

// TestCoordinatorLostCASReloads: two gateways that both think they
// coordinate: the one whose write loses to a newer generation reloads the
// group (its waiting members are sent to look the coordinator up again),
// and a commit of the generation the group left, never acknowledged, is
// refused NOT_COORDINATOR instead of going over the newer record.
func TestCoordinatorLostCASReloads(t *testing.T) {
	leakCheck(t)
	kv := newFakeKV()
	r1 := newRig(t, kv, testLimits())
	a, gen := r1.stable("app")
	r2 := newRig(t, kv, testLimits())
	if c := r2.heartbeat("app", a, gen); c != kerr.RebalanceInProgress.Code { // r2 loads the group
		t.Fatalf("heartbeat at the second gateway: %d", c)
	}
	// r2 runs the next generation: a rejoins there.
	if j := r2.c.JoinGroup(context.Background(), joinReq(5, "app", a)); j.ErrorCode != 0 || j.Generation != gen+1 {
		t.Fatalf("join at the second gateway: %+v", j)
	}
	// r1 still serves generation gen: a member waits there to rejoin, and
	// a commit of generation gen, whose write loses.
	jb := r1.joinAsync("app", "")
	if c := r1.commit("app", a, gen, "orders", 0, 77); c != kerr.NotCoordinator.Code {
		t.Fatalf("commit at the first gateway: %d", c)
	}
	if j := <-jb; j.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("join waiting at the losing gateway: %+v", j)
	}
	if rec, _ := kv.stored("app"); rec.Generation != gen+1 || len(rec.Offsets) != 0 {
		t.Fatalf("record: %+v", rec)
	}
	if off, c := r1.fetch("app", "orders", 0); off != -1 || c != 0 {
		t.Fatalf("fetch at the first gateway: %d %d", off, c)
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	firsts := map[int32]int{}
	for _, w := range kv.writes {
		if w.State == "CompletingRebalance" {
			firsts[w.Generation]++
		}
	}
	if firsts[gen+1] != 1 {
		t.Fatalf("generation %d written %d times as a new generation", gen+1, firsts[gen+1])
	}
}

// TestCoordinatorFencedCommits: two gateways that both think they
// coordinate one generation: a commit taken by one loses to the offset
// the other wrote (and acknowledged) for that partition since, and is
// refused NOT_COORDINATOR; one for a partition nobody else wrote is
// written over the re-read record.
func TestCoordinatorFencedCommits(t *testing.T) {
	leakCheck(t)
	kv := newFakeKV()
	r1 := newRig(t, kv, testLimits())
	a, gen := r1.stable("app")
	if c := r1.commit("app", a, gen, "orders", 0, 10); c != 0 {
		t.Fatalf("commit: %d", c)
	}
	r2 := newRig(t, kv, testLimits())
	if c := r2.heartbeat("app", a, gen); c != kerr.RebalanceInProgress.Code { // r2 loads the group
		t.Fatalf("heartbeat at the second gateway: %d", c)
	}
	if c := r2.commit("app", a, gen, "orders", 0, 50); c != 0 {
		t.Fatalf("commit at the second gateway: %d", c)
	}
	if c := r1.commit("app", a, gen, "orders", 0, 40); c != kerr.NotCoordinator.Code {
		t.Fatalf("commit over the other gateway's: %d", c)
	}
	if c := r1.commit("app", a, gen, "orders", 1, 7); c != 0 {
		t.Fatalf("commit of another partition: %d", c)
	}
	rec, _ := kv.stored("app")
	if rec.Offsets["orders"][0].Offset != 50 || rec.Offsets["orders"][1].Offset != 7 {
		t.Fatalf("record: %+v", rec.Offsets)
	}
	if off, _ := r1.fetch("app", "orders", 0); off != 50 {
		t.Fatalf("fetch at the first gateway: %d", off)
	}
}

// TestCoordinatorOffsetsAndAdmin: commit limits, simple commits, version
// checks, describe and delete.
func TestCoordinatorOffsetsAndAdmin(t *testing.T) {
	leakCheck(t)
	r := newRig(t, newFakeKV(), testLimits())
	if c := r.commit("simple", "", -1, "orders", 0, 5); c != 0 {
		t.Fatalf("simple commit: %d", c)
	}
	if c := r.commit("simple", "", -1, "bad topic", 0, 5); c != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("bad topic: %d", c)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group = 8, "simple"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Metadata = kmsg.StringPtr(string(make([]byte, meta.MaxKafkaOffsetMetadata+1)))
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "orders", Partitions: []kmsg.OffsetCommitRequestTopicPartition{p}}}
	if c := r.c.OffsetCommit(context.Background(), req).Topics[0].Partitions[0].ErrorCode; c != kerr.OffsetMetadataTooLarge.Code {
		t.Fatalf("large metadata: %d", c)
	}
	req.Version = 10
	if c := r.c.OffsetCommit(context.Background(), req).Topics[0].Partitions[0].ErrorCode; c != kerr.UnsupportedVersion.Code {
		t.Fatalf("v10: %d", c)
	}
	f := kmsg.NewPtrOffsetFetchRequest()
	f.Version, f.Group = 1, "simple"
	f.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "orders", Partitions: []int32{0, 1}}}
	fr := r.c.OffsetFetch(context.Background(), f)
	if ps := fr.Topics[0].Partitions; ps[0].Offset != 5 || ps[1].Offset != -1 {
		t.Fatalf("fetch v1: %+v", fr)
	}
	f.Version, f.Topics = 7, nil // all topics
	if fr := r.c.OffsetFetch(context.Background(), f); len(fr.Topics) != 1 || fr.Topics[0].Partitions[0].Offset != 5 {
		t.Fatalf("fetch v7 of every topic: %+v", fr)
	}
	d := kmsg.NewPtrDescribeGroupsRequest()
	d.Version, d.Groups = 6, []string{"nobody"}
	if g := r.c.DescribeGroups(context.Background(), d).Groups[0]; g.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("describe v6 of an absent group: %+v", g)
	}
	m, _ := r.stable("busy")
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Version, del.Groups = 2, []string{"busy", "simple", "nobody"}
	codes := []int16{}
	testkit.WaitFor(t, "the simple group's record", func() bool {
		r.advance(100 * time.Millisecond)
		_, rev := r.kv.stored("simple")
		return rev != 0
	})
	for _, g := range r.c.DeleteGroups(context.Background(), del).Groups {
		codes = append(codes, g.ErrorCode)
	}
	if codes[0] != kerr.NonEmptyGroup.Code || codes[1] != 0 || codes[2] != kerr.GroupIDNotFound.Code {
		t.Fatalf("delete: %v", codes)
	}
	if _, rev := r.kv.stored("simple"); rev != 0 {
		t.Fatal("deleted group's record is still there")
	}
	if off, _ := r.fetch("simple", "orders", 0); off != -1 {
		t.Fatalf("offset of a deleted group: %d", off)
	}
	_ = m
}

// TestCoordinatorTicker: the coordinator's own ticker runs the timers
// (here: a session expires on the real clock), and Close stops it.
func TestCoordinatorTicker(t *testing.T) {
	leakCheck(t)
	lim := testLimits()
	lim.Tick = 10 * time.Millisecond
	c, err := NewCoordinator(CoordinatorConfig{KV: newFakeKV(), IsCoordinator: func(string) bool { return true },
		Logger: testkit.Logger(t, slog.LevelError), Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	req := joinReq(3, "app", "")
	req.SessionTimeoutMillis = 1000
	j := c.JoinGroup(context.Background(), req)
	if j.ErrorCode != 0 {
		t.Fatalf("join: %+v", j)
	}
	testkit.WaitFor(t, "the session to expire", func() bool {
		d := kmsg.NewPtrDescribeGroupsRequest()
		d.Groups = []string{"app"}
		return c.DescribeGroups(context.Background(), d).Groups[0].State == "Empty"
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
