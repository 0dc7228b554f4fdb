package sim

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/kafka"
	"github.com/raidq/raidq/bus/meta"
)

// The Kafka group coordinator, as shipped: KafkaConfig.Gateways simulated
// Kafka gateways each run an actors/kafka Coordinator (coordinator.go,
// coordinator_write.go, groups.go, groups_offsets.go and the core's
// KafkaGroup) in the bubble (bubble.go), each on its own clock (skewed,
// drifting). Its ports are simulated (kafka_group_ports.go): the groups
// bucket lives in the simulated KV with its stalls, cut-offs, lost
// messages and lost acks; IsCoordinator is the gateway's own view of the
// live gateways, the group's coordinator being the first of them in a
// rank drawn from the seed (actors/kafka's registry ranks gateways the
// same way for every group: one rank here).
//
// Gateways crash (their ports die at once; the Coordinator is then closed
// unseen) or stop gracefully (Coordinator.Close, which flushes), and come
// back as a new process 1.5-5 s later. Each other gateway sees a join or
// a graceful leave up to Lag late, a crash Detect plus up to Lag late
// (the registry's beat and session), so for a while two gateways may both
// think they coordinate the group, or none: coordination moves between
// them as it does when gateways join and leave.
//
// The group's members are the environment, modelled on franz-go's
// consumer (eager protocol, range assignor): each finds the coordinator
// (FindCoordinator, answered from a random live gateway's view), joins
// (MEMBER_ID_REQUIRED first), syncs (the leader assigns ranges of the
// topic's partitions to the join's members, sorted by id), fetches its
// partitions' committed offsets and "consumes": each assigned
// partition's position advances every ~200 ms; it heartbeats every
// session/3 and commits its positions every second. REBALANCE_IN_PROGRESS
// makes it commit and rejoin; ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID
// (its id forgotten) make it drop its partitions and rejoin;
// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a broken connection or a
// timeout make it find the coordinator again and retry;
// COORDINATOR_LOAD_IN_PROGRESS makes it retry; heartbeats failing for a
// session drop its partitions. Members crash (back 1-5 s later as a new
// member), leave (commit, LeaveGroup; back later) and join late. Client
// requests travel 0.2-5 ms each way; each is a call of the Coordinator's
// method on a goroutine of the bubble.
//
// Checks:
//   - one owner per partition per generation: all JoinGroup replies of a
//     generation name one leader; within a generation no two members act
//     on assignments that share a partition, and every assignment a
//     member acts on is the one that generation's leader sent in its
//     SyncGroup (one plan per generation).
//   - committed offsets: an OffsetCommit answered OK is never lost. Every
//     OffsetFetch answered OK, by any gateway, returns for each partition
//     at least the highest offset acknowledged before it. Excused, as
//     coordinator.go documents: the commits a gateway acknowledged and
//     had not yet written when it crashed (or when its flush gave up,
//     which it logs), i.e. the KV's record then held less. A commit
//     refused (ILLEGAL_GENERATION and the like) is no commit.
//   - progress: once the last fault is over (quiet), the group reaches a
//     generation in which every live member acts on its assignment,
//     together every partition, within kafkaBound (below), and every
//     member that holds partitions then has a commit answered OK.

// KafkaConfig is the Kafka group part of a run (kafka_group.go). Gateways
// 0 means none.
type KafkaConfig struct {
	Gateways   int           // gateways running a Coordinator (2-3)
	Members    int           // consumer processes of the one group (2-5)
	Partitions int           // the topic's partitions (2-6)
	Session    time.Duration // members' session and rebalance timeout
	Crashes    int           // gateway crashes; each back after 1.5-5 s
	Leaves     int           // graceful gateway stops (Close); each back after 1.5-5 s
	Lag        time.Duration // a gateway sees another join or leave up to this late
	Detect     time.Duration // ... and a crashed one gone this long after (plus Lag)
	// Member faults: crashes (back after 1-5 s), graceful leaves (back
	// after 1-5 s) and members that join only after the start.
	MemberCrashes, MemberLeaves, LateJoins int
	CutOffs                                int // per-gateway KV cut-offs of 1 s to 4 s
	Skew                                   time.Duration
	Drift                                  int64

	bugs kafka.CoordinatorBugs // deliberate bugs in the shipped coordinator (tests only)
	// strict reports the handover race (fetched) as a violation.
	strict bool
}

// bubbled reports whether the run has shipped drivers, run in a bubble.
func (c Config) bubbled() bool { return c.Lease.Holders > 0 || c.Kafka.Gateways > 0 }

const (
	kafkaGroup   = "sim-app"
	kafkaTopic   = "events"
	kafkaBackoff = 100 * int64(time.Millisecond) // client retry backoff: this to 3x
	kafkaReqWait = 5 * int64(time.Second)        // client request timeout (franz-go's RequestTimeoutOverhead)
	kafkaCommit  = int64(time.Second)            // auto-commit interval
	kafkaConsume = 200 * int64(time.Millisecond) // mean time between a member's consumption steps
	kafkaRetryMx = 5 * int64(time.Second)        // the coordinator's RetryMax (default)
	kafkaInitial = 3 * int64(time.Second)        // the coordinator's InitialDelay (default)
)

var (
	errKafkaConn    = errors.New("connection broken")
	errKafkaTimeout = errors.New("request timed out")
)

// kafkaRun is the Kafka part of a run.
type kafkaRun struct {
	s       *sim
	cfg     KafkaConfig
	gws     []*kgateway
	rank    []int // gateway indices, first = the group's preferred coordinator
	members []*kmember
	start   int64
	quiet   int64 // the end of the last fault
	end     int64
	done    bool
	reqs    uint64
	pending map[uint64]*kreq // client requests a gateway process holds

	// For the checks.
	leaders map[int32]string          // generation -> leader named by its first JoinGroup reply
	plans   map[int32][]kplan         // generation -> the assignments its leaders sent
	acts    map[int32]map[string]kact // generation -> member -> the assignment it acts on
	commits []kcommit                 // OffsetCommits answered OK
	sent    map[int32]map[int64]bool  // the offsets OffsetCommits carried, by partition
	stats   kstats
}

type kstats struct {
	generations, takeovers, commits, fetches, rejoins, excused, crashes, leaves, handover int
	maxSettle                                                                             time.Duration
}

// kplan is the assignment a generation's leader sent in SyncGroup.
type kplan struct {
	leader string
	assign map[string][]int32 // by member name
}

type kact struct {
	parts []int32
	plan  int // index in plans[gen]
	at    int64
}

// kcommit is one partition's offset in an OffsetCommit answered OK.
type kcommit struct {
	part    int32
	off     int64
	gen     int32
	member  string
	by      *kgwInc
	at      int64
	excused bool // lost with its gateway's last write interval
}

// kgateway is one Kafka gateway across its restarts.
type kgateway struct {
	k       *kafkaRun
	id      int
	name    string
	clk     actorClock
	inc     *kgwInc // the running process; nil while down
	closing bool    // a graceful stop under way
	runs    int
	view    []bool   // the gateways it sees live
	seen    []uint64 // by gateway: the last of its changes its view took
	changes uint64   // its liveness changes, numbered
	coord   bool     // it thinks it coordinates the group
}

// kafkaBound bounds the time from quiet to a settled group: a member
// that crashed just before quiet is dropped within its session S; the
// others learn of the rebalance at their next heartbeat (S/3); the
// coordinator's generation write may wait out a failed write's backoff
// (RetryMax, 5 s); the join phase lasts at most the rebalance timeout
// (S) or, for an empty group, InitialDelay (3 s); a member removed
// meanwhile (its session lapsed while its heartbeats failed) rejoins as a
// new member, which costs one more rebalance (S/3 + S); plus 2 s for the
// clients' backoffs, lookups and the sync.
func (k *kafkaRun) bound() int64 {
	S := int64(k.cfg.Session)
	return S + S/3 + kafkaRetryMx + max(S, kafkaInitial) + S/3 + S + int64(2*time.Second)
}

// scheduleKafka builds the gateways, the members and their faults.
func (s *sim) scheduleKafka() {
	c := s.cfg.Kafka
	k := &kafkaRun{s: s, cfg: c, start: s.now + writeStart, pending: map[uint64]*kreq{},
		leaders: map[int32]string{}, plans: map[int32][]kplan{}, acts: map[int32]map[string]kact{}}
	s.kafka = k
	k.rank = s.rnd.Perm(c.Gateways)
	span := int64(12 * time.Second)
	if s.cfg.Group.Members == 0 && s.cfg.Lease.Holders == 0 {
		s.planKVFaults(k.start, k.start+span) // else planned already, over the same time
	}
	var clocks strings.Builder
	for i := range c.Gateways {
		g := &kgateway{k: k, id: i, name: sprintf("k%d", i), clk: actorClock{skew: s.skew(c.Skew), ppm: s.ppmDraw(c.Drift)},
			view: make([]bool, c.Gateways), seen: make([]uint64, c.Gateways)}
		k.gws = append(k.gws, g)
		clocks.WriteString(sprintf(" %s=%s", g.name, g.clk))
	}
	s.log.add("kafka: gateways%s, rank %v; %d members, %d partitions, session %v", clocks.String(), k.rankNames(),
		c.Members, c.Partitions, c.Session)
	for _, g := range k.gws {
		s.at(k.start, g.begin)
	}
	quiet := k.start
	// Gateway faults, one at a time: down 1.5-5 s, then 1-3 s up before
	// the next.
	t := k.start + int64(time.Second) + s.rnd.Int64N(int64(2*time.Second))
	faults := make([]bool, 0, c.Crashes+c.Leaves)
	for range c.Crashes {
		faults = append(faults, true)
	}
	for range c.Leaves {
		faults = append(faults, false)
	}
	s.rnd.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	for _, crash := range faults {
		at, back := t, t+int64(1500*time.Millisecond)+s.rnd.Int64N(int64(3500*time.Millisecond))
		s.at(at, func() { k.gatewayDown(k.target(), crash) })
		t = back + int64(time.Second) + s.rnd.Int64N(int64(2*time.Second))
		quiet = max(quiet, back+int64(c.Lag))
		if crash {
			quiet = max(quiet, at+int64(c.Detect+c.Lag))
		}
	}
	for range c.CutOffs {
		g := k.gws[s.rnd.IntN(len(k.gws))]
		s.planCutOff(g.name, k.start, k.start+span, 4*time.Second)
		f := s.kv.cuts[g.name][len(s.kv.cuts[g.name])-1]
		quiet = max(quiet, f.to)
	}
	for _, f := range s.kv.stalls {
		quiet = max(quiet, f.to)
	}
	for i := range c.Members {
		m := &kmember{k: k, slot: i, name: sprintf("m%d", i), coord: -1}
		k.members = append(k.members, m)
		at := k.start
		if i >= c.Members-c.LateJoins && i > 0 {
			at += int64(time.Second) + s.rnd.Int64N(span)
			quiet = max(quiet, at)
		}
		s.at(at, m.begin)
	}
	memberFault := func(leave bool) {
		m := k.members[s.rnd.IntN(len(k.members))]
		at := k.start + int64(time.Second) + s.rnd.Int64N(span)
		back := at + int64(time.Second) + s.rnd.Int64N(int64(4*time.Second))
		s.at(at, func() { m.stop(leave) })
		s.at(back, m.begin)
		quiet = max(quiet, back)
	}
	for range c.MemberCrashes {
		memberFault(false)
	}
	for range c.MemberLeaves {
		memberFault(true)
	}
	k.quiet = quiet
	// The end leaves room for commits after the group settles: three
	// commit periods, plus two lost KV replies (a write-through commit
	// whose write's reply is lost waits the coordinator's KV timeout, 5 s,
	// and the record is re-read before the next write).
	k.end = quiet + k.bound() + 3*kafkaCommit + 2*int64(5*time.Second)
	s.at(k.quiet, func() { s.log.add("kafka: last fault over; the group must settle by %s", s.log.at(k.quiet+k.bound())) })
	s.at(k.end, k.finish)
}

func (k *kafkaRun) rankNames() []string {
	var out []string
	for _, i := range k.rank {
		out = append(out, k.gws[i].name)
	}
	return out
}

// target picks the gateway to fail: most often the coordinator (the
// first live one by rank), else any live one.
func (k *kafkaRun) target() *kgateway {
	s := k.s
	var live []*kgateway
	for _, i := range k.rank {
		if g := k.gws[i]; g.inc != nil && !g.closing {
			live = append(live, g)
		}
	}
	if len(live) == 0 {
		return nil
	}
	if s.rnd.IntN(3) > 0 {
		return live[0]
	}
	return live[s.rnd.IntN(len(live))]
}

// begin starts (or restarts) the gateway's process: a fresh Coordinator,
// seeing the gateways live now; the others see it up to Lag later.
func (g *kgateway) begin() {
	k := g.k
	s := k.s
	if k.done || g.inc != nil {
		return
	}
	g.runs++
	in := &kgwInc{gw: g, proc: newProc(sprintf("%s.%d", g.name, g.runs))}
	// The tick is drawn (90-110 ms, to the ns), not 100 ms: a write
	// started by a tick would time out (KVTimeout, 5 s) at another tick's
	// very instant, and which of the two goroutines Go runs first decides
	// whether the group is dropped unwritten, so the seed would not replay.
	tick := 90*time.Millisecond + time.Duration(s.rnd.Int64N(int64(20*time.Millisecond)))
	c, err := kafka.NewCoordinator(kafka.CoordinatorConfig{KV: in, IsCoordinator: in.isCoordinator, Logger: in.logger(),
		Clock: in.clock, Wall: in.wall, Limits: kafka.GroupLimits{MinSession: time.Second, Tick: tick}, Bugs: k.cfg.bugs,
		IDRand: newIDSource(s.cfg.Seed, in.tag)})
	if err != nil {
		panic(sprintf("sim: kafka.NewCoordinator: %v", err))
	}
	in.c = c
	g.inc, g.closing = in, false
	s.log.add("%s starts its Kafka group coordinator (%s, clock %s)", g.name, in.tag, g.clk)
	for _, o := range k.gws {
		g.view[o.id] = o.inc != nil && !o.closing
	}
	k.sees(g, g, true, 0)
	for _, o := range k.gws {
		if o != g {
			k.sees(o, g, true, s.rnd.Int64N(int64(k.cfg.Lag)+1))
		}
	}
	k.updateCoord()
}

// sees changes viewer's view of g to live, after d; a change seen
// later than one that came after it is overtaken (a crash detected after
// the restart was seen).
func (k *kafkaRun) sees(viewer, g *kgateway, live bool, d int64) {
	g.changes++
	n := g.changes
	apply := func() {
		if viewer.seen[g.id] > n {
			return
		}
		viewer.seen[g.id] = n
		viewer.view[g.id] = live
		k.updateCoord()
	}
	if d == 0 {
		apply()
		return
	}
	k.s.at(k.s.now+d, apply)
}

// coordOf is the gateway g's view of the group's coordinator (-1: none).
func (k *kafkaRun) coordOf(g *kgateway) int {
	for _, i := range k.rank {
		if g.view[i] {
			return i
		}
	}
	return -1
}

// updateCoord sets every running gateway's IsCoordinator from its view.
func (k *kafkaRun) updateCoord() {
	for _, g := range k.gws {
		c := g.inc != nil && !g.closing && k.coordOf(g) == g.id
		if c != g.coord {
			g.coord = c
			k.s.log.add("%s %s", g.name, map[bool]string{true: "now thinks it coordinates the group", false: "no longer thinks it coordinates the group"}[c])
			if c {
				k.stats.takeovers++
			}
		}
		if g.inc != nil {
			g.inc.coord.Store(c)
		}
	}
}

// gatewayDown crashes g (its ports die at once; its Coordinator is closed
// unseen) or stops it gracefully (Close flushes through live ports, the
// process dies once Close returns). It comes back 1.5-5 s later.
func (k *kafkaRun) gatewayDown(g *kgateway, crash bool) {
	s := k.s
	if g == nil || g.inc == nil || k.done {
		return
	}
	in := g.inc
	back := s.now + int64(1500*time.Millisecond) + s.rnd.Int64N(int64(3500*time.Millisecond))
	for _, o := range k.gws {
		if o == g {
			continue
		}
		d := s.rnd.Int64N(int64(k.cfg.Lag) + 1)
		if crash {
			d += int64(k.cfg.Detect)
		}
		k.sees(o, g, false, d)
	}
	if crash {
		k.stats.crashes++
		s.log.add("%s CRASHES (%s)", g.name, in.tag)
		g.inc = nil
		k.kill(in, "crashed")
		k.updateCoord()
		s.at(back, g.begin)
		return
	}
	k.stats.leaves++
	s.log.add("%s STOPS (closes its coordinator, flushing)", g.name)
	g.closing = true
	k.updateCoord()
	s.bubble.wg.Go(func() {
		err := in.c.Close()
		s.bubble.post(in.tag+"/close", 0, func() {
			if err != nil {
				s.log.add("%s: Close: %v", in.tag, err)
				k.lost(in, "closed unwritten")
			}
			in.die()
			k.broken(in)
			if g.inc == in {
				g.inc, g.closing = nil, false
				s.at(max(back, s.now+1), g.begin)
			}
		})
	})
}

// kill ends a process at once: nothing it does from now on is seen.
func (k *kafkaRun) kill(in *kgwInc, why string) {
	in.die()
	k.lost(in, why)
	k.broken(in)
	k.s.bubble.wg.Go(func() { _ = in.c.Close() })
}

// broken fails the requests the dead process held: their connections
// break.
func (k *kafkaRun) broken(in *kgwInc) {
	for _, id := range slices.Sorted(maps.Keys(k.pending)) {
		if r := k.pending[id]; r.in == in {
			delete(k.pending, id)
			k.s.at(k.s.now+k.hop(), func() { r.finish(nil, errKafkaConn) })
		}
	}
}

// lost excuses the commits in acknowledged and not in the KV's record
// now: the process ended (or gave up flushing) without writing them.
func (k *kafkaRun) lost(in *kgwInc, why string) {
	stored := k.storedOffsets()
	n := 0
	for i := range k.commits {
		c := &k.commits[i]
		if c.by == in && !c.excused && stored[c.part] < c.off {
			c.excused = true
			n++
		}
	}
	if n > 0 {
		k.stats.excused += n
		k.s.log.add("kafka: %s %s: %d acknowledged commit(s) not in the KV are lost (excused)", in.tag, why, n)
	}
}

// storedOffsets is the topic's offsets in the KV's record now (-1: none).
func (k *kafkaRun) storedOffsets() map[int32]int64 {
	r, _ := k.s.kv.data[kgroupKey(kafkaGroup)].val.(*kgRecord)
	return k.offsetsOf(r)
}

// offsetsOf is the topic's offsets in a record (-1: none).
func (k *kafkaRun) offsetsOf(r *kgRecord) map[int32]int64 {
	out := map[int32]int64{}
	for p := range int32(k.cfg.Partitions) {
		out[p] = -1
	}
	if r == nil {
		return out
	}
	rec, err := meta.DecodeKafkaGroup(r.b)
	if err != nil {
		return out
	}
	for p, o := range rec.Offsets[kafkaTopic] {
		out[p] = o.Offset
	}
	return out
}

// coordLog takes one of a coordinator's log lines, on the loop.
func (k *kafkaRun) coordLog(in *kgwInc, line string) {
	k.s.log.add("%s: %s", in.tag, line)
	if strings.HasPrefix(line, "kafka groups: dropping a group whose state could not be written") {
		k.lost(in, "dropped the group unwritten")
	}
	if strings.HasPrefix(line, "kafka groups: generation started") {
		k.stats.generations++
	}
}

func (k *kafkaRun) hop() int64 { return 200_000 + k.s.rnd.Int64N(4_800_000) }

// finish ends the Kafka part: every process stops (as crashes: the run is
// over).
func (k *kafkaRun) finish() {
	s := k.s
	k.checkSettled()
	for _, m := range k.members {
		m.up = false
		m.ep++
	}
	k.stop()
	k.done = true
	st := k.stats
	s.log.add("kafka: done generations=%d takeovers=%d commits=%d fetches=%d rejoins=%d excused=%d gw-crashes=%d gw-leaves=%d handover-misses=%d max-settle=%v",
		st.generations, st.takeovers, st.commits, st.fetches, st.rejoins, st.excused, st.crashes, st.leaves, st.handover, st.maxSettle.Round(time.Millisecond))
}

// stop kills every gateway process still running (the run's end).
func (k *kafkaRun) stop() {
	for _, g := range k.gws {
		if in := g.inc; in != nil {
			g.inc = nil
			in.die()
			k.s.bubble.wg.Go(func() { _ = in.c.Close() })
		}
	}
}

// checkKafka (with the end-of-run checks): a Kafka part that did not
// reach its end (the run stuck) is a violation; its gateways stop.
func (s *sim) checkKafka() {
	if k := s.kafka; k != nil && !k.done {
		s.violate("kafka: the run stopped before the Kafka part ended (at %s)", s.log.at(k.end))
		k.done = true
		k.stop()
	}
}

// kreq is one client request in flight.
type kreq struct {
	id     uint64
	m      *kmember
	ep     uint64
	in     *kgwInc // the process holding it, once it arrived
	done   bool
	handle func(resp any, err error)
}

func (r *kreq) finish(resp any, err error) {
	if r.done {
		return
	}
	r.done = true
	delete(r.m.k.pending, r.id)
	if r.m.up && r.m.ep == r.ep {
		r.handle(resp, err)
	}
}

// request sends a request from m to gateway gi: call runs the
// Coordinator's method there; answered is told the answer as the gateway
// sends it (for the checks), handle as the member gets it (or the
// connection breaks, or the request times out).
func (k *kafkaRun) request(m *kmember, gi int, wait int64, call func(ctx context.Context, c *kafka.Coordinator) any,
	answered func(in *kgwInc, resp any), handle func(resp any, err error)) {
	s := k.s
	k.reqs++
	r := &kreq{id: k.reqs, m: m, ep: m.ep, handle: handle}
	s.at(s.now+wait, func() { r.finish(nil, errKafkaTimeout) })
	client := m.client
	s.at(s.now+k.hop(), func() {
		var in *kgwInc
		if gi >= 0 {
			in = k.gws[gi].inc
		}
		if in == nil || r.done {
			s.at(s.now+k.hop(), func() { r.finish(nil, errKafkaConn) })
			return
		}
		r.in = in
		k.pending[r.id] = r
		ctx, cancel := context.WithTimeout(kafka.WithClient(context.Background(), client, "sim"), time.Duration(wait))
		in.serve(ctx, func(ctx context.Context) any {
			defer cancel()
			return call(ctx, in.c)
		}, func(resp any) {
			if answered != nil {
				answered(in, resp)
			}
			s.at(s.now+k.hop(), func() { r.finish(resp, nil) })
		})
	})
}

// findCoordinator asks a random live gateway who coordinates the group
// (its own view).
func (k *kafkaRun) findCoordinator(m *kmember, handle func(coord int, err error)) {
	s := k.s
	var live []*kgateway
	for _, g := range k.gws {
		if g.inc != nil && !g.closing {
			live = append(live, g)
		}
	}
	if len(live) == 0 {
		s.at(s.now+k.hop(), func() { handle(-1, errKafkaConn) })
		return
	}
	g := live[s.rnd.IntN(len(live))]
	ep := m.ep
	s.at(s.now+k.hop(), func() {
		if g.inc == nil {
			s.at(s.now+k.hop(), func() {
				if m.up && m.ep == ep {
					handle(-1, errKafkaConn)
				}
			})
			return
		}
		c := k.coordOf(g)
		s.at(s.now+k.hop(), func() {
			if m.up && m.ep == ep {
				handle(c, nil)
			}
		})
	})
}

// --- Checks -------------------------------------------------------------

// joined records a JoinGroup answered OK: one leader per generation.
func (k *kafkaRun) joined(in *kgwInc, resp *kmsg.JoinGroupResponse) {
	leader := memberName(resp.LeaderID)
	if l, ok := k.leaders[resp.Generation]; ok && l != leader {
		k.s.violate("kafka: generation %d has two leaders: %s, and %s named by %s to %s", resp.Generation, l, leader,
			in.tag, memberName(resp.MemberID))
	}
	k.leaders[resp.Generation] = leader
}

// acting records that m acts on parts in gen: from that generation's
// one plan, sharing no partition with another member of it.
func (k *kafkaRun) acting(m *kmember, gen int32, parts []int32) {
	s := k.s
	name := memberName(m.id)
	plan := -1
	for i, p := range k.plans[gen] {
		if slices.Equal(p.assign[name], parts) {
			plan = i
			break
		}
	}
	if plan < 0 {
		s.violate("kafka: %s acts on partitions %v in generation %d, which no leader assigned it", name, parts, gen)
	}
	acts := k.acts[gen]
	if acts == nil {
		acts = map[string]kact{}
		k.acts[gen] = acts
	}
	for _, o := range slices.Sorted(maps.Keys(acts)) {
		a := acts[o]
		if o == name {
			continue
		}
		if a.plan != plan {
			s.violate("kafka: generation %d: %s acts on leader %s's plan, %s on leader %s's", gen, o,
				k.planLeader(gen, a.plan), name, k.planLeader(gen, plan))
		}
		for _, p := range parts {
			if slices.Contains(a.parts, p) {
				s.violate("kafka: generation %d: partition %d owned by %s and %s", gen, p, o, name)
			}
		}
	}
	acts[name] = kact{parts: parts, plan: plan, at: s.now}
}

func (k *kafkaRun) planLeader(gen int32, i int) string {
	if i < 0 || i >= len(k.plans[gen]) {
		return "none"
	}
	return k.plans[gen][i].leader
}

// committed records an OffsetCommit's partitions answered OK.
func (k *kafkaRun) committed(in *kgwInc, m *kmember, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse) {
	for i, t := range resp.Topics {
		for j, p := range t.Partitions {
			if p.ErrorCode == 0 {
				k.stats.commits++
				k.commits = append(k.commits, kcommit{part: p.Partition, off: req.Topics[i].Partitions[j].Offset, gen: req.Generation,
					member: memberName(req.MemberID), by: in, at: k.s.now})
			}
		}
	}
}

// fetched checks an OffsetFetch answered OK by in: for each partition,
// the offset of the latest commit acknowledged before it (excused ones
// aside), or of one acknowledged after that (a member may commit less
// than another did before it, having resumed from an excused loss).
//
// The handover race (a finding, kafka_group_test.go's
// TestSimKafkaHandoverFinding): a commit another gateway acknowledged and
// had not yet written when in last read the record is not in in's memory,
// so in answers without it. Unless KafkaConfig.strict, such commits are
// counted and logged ("HANDOVER MISS") instead of reported.
func (k *kafkaRun) fetched(in *kgwInc, m *kmember, resp *kmsg.OffsetFetchResponse) {
	if resp.ErrorCode != 0 {
		return
	}
	k.stats.fetches++
	s := k.s
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				continue
			}
			known := func(c *kcommit) bool { return c.by == in || in.read[p.Partition] >= c.off }
			strict := func(*kcommit) bool { return true }
			check := func(eligible func(*kcommit) bool) *kcommit {
				latest := -1
				for i := range k.commits {
					c := &k.commits[i]
					if c.part == p.Partition && c.at < s.now && !c.excused && eligible(c) {
						latest = i
					}
				}
				if latest < 0 {
					return nil
				}
				for i := latest; i < len(k.commits); i++ {
					if c := &k.commits[i]; c.part == p.Partition && c.off == p.Offset {
						return nil
					}
				}
				// A commit written and not answered OK (its gateway died
				// first, or answered a timeout): Kafka's ambiguity too.
				if k.sent[p.Partition][p.Offset] && p.Offset >= k.commits[latest].off {
					return nil
				}
				return &k.commits[latest]
			}
			c := check(known)
			if c == nil && !k.cfg.strict {
				if h := check(strict); h != nil {
					k.stats.handover++
					s.log.add("kafka: HANDOVER MISS: %s answered %s's OffsetFetch with partition %d at %d, without %d acknowledged by %s at %s (%s, generation %d), unwritten when %s last read the record",
						in.tag, memberName(m.id), p.Partition, p.Offset, h.off, h.by.tag, s.log.at(h.at), h.member, h.gen, in.tag)
				}
				continue
			}
			if c == nil {
				c = check(strict)
			}
			if c != nil {
				s.violate("kafka: %s answered %s's OffsetFetch with partition %d at %d, not %d acknowledged by %s at %s (%s, generation %d) nor a later commit",
					in.tag, memberName(m.id), p.Partition, p.Offset, c.off, c.by.tag, s.log.at(c.at), c.member, c.gen)
			}
		}
	}
}

// checkSettled (at the end): every live member acts on its assignment in
// one generation, together every partition, settled within the bound of
// quiet, each holding partitions with a commit answered OK since.
func (k *kafkaRun) checkSettled() {
	s := k.s
	var gen int32 = -1
	var settled int64
	covered := map[int32]bool{}
	ok := true
	for _, m := range k.members {
		switch {
		case !m.up:
			continue
		case !m.acting:
			s.violate("kafka: at the end %s (%s) does not act on an assignment (phase %s, generation %d)", m.name, memberName(m.id), m.phase, m.gen)
			ok = false
			continue
		case gen >= 0 && m.gen != gen:
			s.violate("kafka: at the end %s is in generation %d, another member in %d", m.name, m.gen, gen)
			ok = false
		}
		gen = m.gen
		settled = max(settled, m.since)
		for _, p := range m.assign {
			covered[p] = true
		}
	}
	if !ok || gen < 0 {
		return
	}
	if len(covered) != k.cfg.Partitions {
		s.violate("kafka: at the end generation %d's live members hold %d of %d partitions", gen, len(covered), k.cfg.Partitions)
		return
	}
	d := settled - k.quiet
	k.stats.maxSettle = time.Duration(max(d, 0))
	if d > k.bound() {
		s.violate("kafka: the group settled at %s, %v after the last fault, more than %v", s.log.at(settled),
			time.Duration(d).Round(time.Millisecond), time.Duration(k.bound()))
	}
	for _, m := range k.members {
		if m.up && len(m.assign) > 0 && m.lastCommit <= settled {
			s.violate("kafka: %s has no commit answered OK since the group settled at %s", m.name, s.log.at(settled))
		}
	}
}

// --- Members --------------------------------------------------------------

type kphase uint8

const (
	kDown kphase = iota
	kJoin
	kSync
	kStable // synced: heartbeating; acting once its offsets are fetched
	kLeave
)

func (p kphase) String() string { return [...]string{"down", "join", "sync", "stable", "leave"}[p] }

// kmember is one consumer process of the group, across restarts.
type kmember struct {
	k      *kafkaRun
	slot   int
	name   string
	up     bool
	runs   int
	ids    int    // member ids asked for, for the client id
	client string // the client id of the current member id: name.run.ids
	id     string // member id ("": none yet)
	gen    int32
	ep     uint64 // bumped at every phase change; older answers are dropped
	phase  kphase
	coord  int // gateway index believed to coordinate (-1: unknown)

	assign     []int32
	pos        map[int32]int64
	acting     bool
	again      bool  // restart once the leave under way ends
	since      int64 // acting since
	beatOK     int64 // last heartbeat answered OK (sent at)
	committing bool
	lastCommit int64 // last commit answered OK (all partitions)
}

func (m *kmember) session() int64 { return int64(m.k.cfg.Session) }

func (m *kmember) backoff() int64 { return kafkaBackoff + m.k.s.rnd.Int64N(2*kafkaBackoff) }

// begin starts (or restarts) the member process.
func (m *kmember) begin() {
	k := m.k
	if k.done || m.up {
		m.again = m.up && m.phase == kLeave // still leaving: back once it has left
		return
	}
	m.up, m.id, m.gen, m.coord = true, "", -1, -1
	m.runs++
	k.s.log.add("%s starts (run %d)", m.name, m.runs)
	m.join()
}

// stop crashes the member, or leaves gracefully: it commits, then sends
// LeaveGroup, then ends.
func (m *kmember) stop(leave bool) {
	k := m.k
	if !m.up || k.done {
		return
	}
	if !leave {
		k.s.log.add("%s CRASHES (%s)", m.name, memberName(m.id))
		m.up, m.acting, m.phase = false, false, kDown
		m.ep++
		return
	}
	k.s.log.add("%s LEAVES (%s)", m.name, memberName(m.id))
	wasActing := m.acting
	m.quiesce(kLeave)
	end := func() {
		m.up, m.phase, m.assign = false, kDown, nil
		m.ep++
		if m.again {
			m.again = false
			m.begin()
		}
	}
	sendLeave := func() {
		if m.id == "" || m.coord < 0 {
			end()
			return
		}
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Version, req.Group = 5, kafkaGroup
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m.id
		req.Members = append(req.Members, lm)
		k.request(m, m.coord, kafkaReqWait, func(ctx context.Context, c *kafka.Coordinator) any { return c.LeaveGroup(ctx, req) },
			nil, func(any, error) { end() })
	}
	if wasActing && m.coord >= 0 {
		m.commit(func(bool) { sendLeave() })
		return
	}
	sendLeave()
}

// enter moves to phase p: answers to earlier requests are dropped, the
// member stops acting on its assignment.
func (m *kmember) enter(p kphase) {
	m.phase = p
	m.ep++
	if p != kStable {
		m.acting, m.assign, m.committing = false, nil, false
	}
}

// quiesce stops the member's heartbeats and consumption (answers to
// earlier requests are dropped) but keeps its assignment and positions
// for a last commit.
func (m *kmember) quiesce(p kphase) {
	m.phase, m.acting, m.committing = p, false, false
	m.ep++
}

// find asks for the coordinator, then runs then (again after a backoff
// if none is known).
func (m *kmember) find(then func()) {
	ep := m.ep
	m.k.findCoordinator(m, func(c int, err error) {
		if err != nil || c < 0 {
			m.k.s.at(m.k.s.now+m.backoff(), func() {
				if m.up && m.ep == ep {
					m.find(then)
				}
			})
			return
		}
		m.coord = c
		then()
	})
}

// retry runs fn after a backoff, unless the member moved on meanwhile.
func (m *kmember) retry(fn func()) {
	ep := m.ep
	m.k.s.at(m.k.s.now+m.backoff(), func() {
		if m.up && m.ep == ep {
			fn()
		}
	})
}

// coordErr: the answer says to look the coordinator up again.
func coordErr(code int16, err error) bool {
	return err != nil || code == int16(core.KafkaNotCoordinator) || code == int16(core.KafkaCoordinatorNotAvailable)
}

// join sends JoinGroup (after finding the coordinator if need be).
func (m *kmember) join() {
	m.enter(kJoin)
	if m.coord < 0 {
		m.find(m.sendJoin)
		return
	}
	m.sendJoin()
}

func (m *kmember) sendJoin() {
	k := m.k
	if m.id == "" {
		m.ids++
		m.client = sprintf("%s.%d.%d", m.name, m.runs, m.ids)
	}
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version, req.Group, req.MemberID, req.ProtocolType = 9, kafkaGroup, m.id, "consumer"
	req.SessionTimeoutMillis = int32(m.k.cfg.Session / time.Millisecond)
	req.RebalanceTimeoutMillis = req.SessionTimeoutMillis
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte(m.name)
	req.Protocols = append(req.Protocols, p)
	k.request(m, m.coord, m.session()+kafkaReqWait, func(ctx context.Context, c *kafka.Coordinator) any { return c.JoinGroup(ctx, req) },
		func(in *kgwInc, resp any) {
			if r := resp.(*kmsg.JoinGroupResponse); r.ErrorCode == 0 {
				k.joined(in, r)
			}
		},
		func(resp any, err error) {
			var r *kmsg.JoinGroupResponse
			code := int16(-1)
			if err == nil {
				r = resp.(*kmsg.JoinGroupResponse)
				code = r.ErrorCode
			}
			switch {
			case coordErr(code, err):
				m.coord = -1
				m.retry(m.join)
			case code == int16(core.KafkaMemberIDRequired):
				m.id = r.MemberID
				m.sendJoin()
			case code == 0:
				m.id, m.gen = r.MemberID, r.Generation
				m.sync(r)
			case code == int16(core.KafkaUnknownMemberID):
				m.id = ""
				m.retry(m.join)
			default: // load in progress, rebalance in progress, ...
				m.retry(m.join)
			}
		})
}

// sync sends SyncGroup; the leader with its range assignment.
func (m *kmember) sync(jr *kmsg.JoinGroupResponse) {
	k := m.k
	m.enter(kSync)
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 5, kafkaGroup, m.id, m.gen
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	if jr.LeaderID == m.id {
		plan := kplan{leader: memberName(m.id), assign: map[string][]int32{}}
		ids := make([]string, 0, len(jr.Members))
		for _, jm := range jr.Members {
			ids = append(ids, jm.MemberID)
		}
		slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(memberName(a), memberName(b)) })
		P, n := k.cfg.Partitions, len(ids)
		next := 0
		for i, id := range ids {
			cnt := P / n
			if i < P%n {
				cnt++
			}
			var parts []int32
			for p := next; p < next+cnt; p++ {
				parts = append(parts, int32(p))
			}
			next += cnt
			plan.assign[memberName(id)] = parts
			a := kmsg.NewSyncGroupRequestGroupAssignment()
			a.MemberID, a.MemberAssignment = id, encodeParts(parts)
			req.GroupAssignment = append(req.GroupAssignment, a)
		}
		k.plans[m.gen] = append(k.plans[m.gen], plan)
		k.s.log.add("%s leads generation %d: %s", m.name, m.gen, planString(plan))
	}
	k.request(m, m.coord, m.session()+kafkaReqWait, func(ctx context.Context, c *kafka.Coordinator) any { return c.SyncGroup(ctx, req) },
		nil, func(resp any, err error) {
			code := int16(-1)
			var r *kmsg.SyncGroupResponse
			if err == nil {
				r = resp.(*kmsg.SyncGroupResponse)
				code = r.ErrorCode
			}
			switch {
			case code == 0:
				m.stable(decodeParts(r.MemberAssignment))
			case coordErr(code, err):
				m.coord = -1
				m.retry(m.join)
			case code == int16(core.KafkaUnknownMemberID):
				m.id = ""
				m.retry(m.join)
			default:
				m.retry(m.join)
			}
		})
}

// stable: synced into m.gen with parts; heartbeats start, then the
// offsets are fetched and the member acts on its assignment.
func (m *kmember) stable(parts []int32) {
	k := m.k
	m.enter(kStable)
	m.assign, m.beatOK = parts, k.s.now
	k.s.log.add("%s (%s) synced generation %d: partitions %v", m.name, memberName(m.id), m.gen, parts)
	ep := m.ep
	k.s.at(k.s.now+m.session()/3, func() { m.beat(ep) })
	m.fetch()
}

func (m *kmember) fetch() {
	k := m.k
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group = 7, kafkaGroup
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic, t.Partitions = kafkaTopic, slices.Clone(m.assign)
	req.Topics = append(req.Topics, t)
	k.request(m, m.coord, kafkaReqWait, func(ctx context.Context, c *kafka.Coordinator) any { return c.OffsetFetch(ctx, req) },
		func(in *kgwInc, resp any) { k.fetched(in, m, resp.(*kmsg.OffsetFetchResponse)) },
		func(resp any, err error) {
			code := int16(-1)
			var r *kmsg.OffsetFetchResponse
			if err == nil {
				r = resp.(*kmsg.OffsetFetchResponse)
				code = r.ErrorCode
			}
			switch {
			case code == 0:
				m.pos = map[int32]int64{}
				for _, t := range r.Topics {
					for _, p := range t.Partitions {
						m.pos[p.Partition] = max(p.Offset, 0)
					}
				}
				m.acting, m.since = true, k.s.now
				k.acting(m, m.gen, m.assign)
				k.s.log.add("%s acts on generation %d: %s", m.name, m.gen, posString(m.assign, m.pos))
				ep := m.ep
				k.s.at(k.s.now+kafkaConsume/2+k.s.rnd.Int64N(kafkaConsume), func() { m.consume(ep) })
				k.s.at(k.s.now+kafkaCommit, func() { m.autoCommit(ep) })
			case coordErr(code, err):
				m.coord = -1
				m.find(m.fetch)
			default:
				m.retry(m.fetch)
			}
		})
}

func (m *kmember) consume(ep uint64) {
	if !m.up || m.ep != ep {
		return
	}
	for _, p := range m.assign {
		m.pos[p] += 1 + m.k.s.rnd.Int64N(3)
	}
	m.k.s.at(m.k.s.now+kafkaConsume/2+m.k.s.rnd.Int64N(kafkaConsume), func() { m.consume(ep) })
}

func (m *kmember) autoCommit(ep uint64) {
	if !m.up || m.ep != ep {
		return
	}
	if !m.committing && m.coord >= 0 && len(m.assign) > 0 {
		m.commit(nil)
	}
	m.k.s.at(m.k.s.now+kafkaCommit, func() { m.autoCommit(ep) })
}

// commit commits the positions. With then, it is the last commit before
// a rejoin or a leave: then runs with the result, whatever it is.
func (m *kmember) commit(then func(ok bool)) {
	k := m.k
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 9, kafkaGroup, m.id, m.gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = kafkaTopic
	for _, p := range m.assign {
		tp := kmsg.NewOffsetCommitRequestTopicPartition()
		tp.Partition, tp.Offset = p, m.pos[p]
		t.Partitions = append(t.Partitions, tp)
	}
	req.Topics = append(req.Topics, t)
	m.committing = true
	if k.sent == nil {
		k.sent = map[int32]map[int64]bool{}
	}
	for _, p := range t.Partitions {
		if k.sent[p.Partition] == nil {
			k.sent[p.Partition] = map[int64]bool{}
		}
		k.sent[p.Partition][p.Offset] = true
	}
	k.request(m, m.coord, kafkaReqWait, func(ctx context.Context, c *kafka.Coordinator) any { return c.OffsetCommit(ctx, req) },
		func(in *kgwInc, resp any) { k.committed(in, m, req, resp.(*kmsg.OffsetCommitResponse)) },
		func(resp any, err error) {
			m.committing = false
			code := int16(-1)
			if err == nil {
				code = 0
				for _, t := range resp.(*kmsg.OffsetCommitResponse).Topics {
					for _, p := range t.Partitions {
						if p.ErrorCode != 0 {
							code = p.ErrorCode
						}
					}
				}
			}
			if code == 0 {
				m.lastCommit = k.s.now
			}
			if then != nil {
				then(code == 0)
				return
			}
			switch {
			case code == 0:
			case coordErr(code, err):
				m.coord = -1
				m.find(func() {})
			case code == int16(core.KafkaRebalanceInProgress):
				m.rejoin()
			case code == int16(core.KafkaIllegalGeneration):
				m.lose("commit: ILLEGAL_GENERATION")
			case code == int16(core.KafkaUnknownMemberID):
				m.id = ""
				m.lose("commit: UNKNOWN_MEMBER_ID")
			}
		})
}

// beat sends a heartbeat every session/3 while stable.
func (m *kmember) beat(ep uint64) {
	k := m.k
	if !m.up || m.ep != ep {
		return
	}
	k.s.at(k.s.now+m.session()/3, func() { m.beat(ep) })
	if k.s.now-m.beatOK > m.session() {
		m.lose(sprintf("no heartbeat answered for %v", time.Duration(k.s.now-m.beatOK).Round(time.Millisecond)))
		return
	}
	if m.coord < 0 {
		return // a lookup is under way
	}
	sent := k.s.now
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 4, kafkaGroup, m.id, m.gen
	k.request(m, m.coord, kafkaReqWait, func(ctx context.Context, c *kafka.Coordinator) any { return c.Heartbeat(ctx, req) },
		nil, func(resp any, err error) {
			code := int16(-1)
			if err == nil {
				code = resp.(*kmsg.HeartbeatResponse).ErrorCode
			}
			switch {
			case code == 0:
				m.beatOK = max(m.beatOK, sent)
			case coordErr(code, err):
				m.coord = -1
				m.find(func() {})
			case code == int16(core.KafkaRebalanceInProgress):
				m.rejoin()
			case code == int16(core.KafkaIllegalGeneration):
				m.lose("heartbeat: ILLEGAL_GENERATION")
			case code == int16(core.KafkaUnknownMemberID):
				m.id = ""
				m.lose("heartbeat: UNKNOWN_MEMBER_ID")
			}
		})
}

// rejoin: the group rebalances; commit what was consumed (eager
// protocol: revoke everything), then rejoin with the member id.
func (m *kmember) rejoin() {
	m.k.stats.rejoins++
	m.k.s.log.add("%s rejoins (rebalance in progress)", m.name)
	if !m.acting {
		m.join()
		return
	}
	m.quiesce(kStable) // stops consuming; the commit takes the positions
	ep := m.ep
	m.commit(func(bool) {
		if m.ep == ep {
			m.join()
		}
	})
}

// lose drops the assignment without committing and rejoins.
func (m *kmember) lose(why string) {
	m.k.stats.rejoins++
	m.k.s.log.add("%s loses its partitions (%s) and rejoins", m.name, why)
	m.join()
}

func encodeParts(ps []int32) []byte {
	var b []byte
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(p), 10)
	}
	return b
}

func decodeParts(b []byte) []int32 {
	var out []int32
	for f := range strings.SplitSeq(string(b), ",") {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, int32(n))
		}
	}
	return out
}

func planString(p kplan) string {
	var b strings.Builder
	for i, n := range slices.Sorted(maps.Keys(p.assign)) {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(sprintf("%s=%v", n, p.assign[n]))
	}
	return b.String()
}

func posString(parts []int32, pos map[int32]int64) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(sprintf("p%d@%d", p, pos[p]))
	}
	if len(parts) == 0 {
		return "no partitions"
	}
	return b.String()
}
