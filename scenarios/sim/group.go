package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/drillhooks"
	"github.com/raidq/raidq/bus/meta"
)

// A consumer group, as shipped: GroupConfig.Members member processes,
// each a *raidq.Consumer started by drillhooks.GroupConsumer (the root
// package's groups.go and group_commit.go, unchanged) in the bubble
// (bubble.go), reading the partition through the KV. A process's ports
// are simulated (group_ports.go): the metadata in the simulated KV with
// its stalls, cut-offs, lost messages, partial listings and stale
// answers (kv.go); its partition readers are the simulation's readers of
// the simulated nodes (reader.go), each handing its deliveries to the
// member's sink on a bubble goroutine of its own and scanning no further
// until the sink returns (as actors.Reader's afterSink); its logger
// writes into the op log. The application is a goroutine per process
// calling Consumer.Next in a loop, recording each delivery (true time,
// member, position, value) and taking 1 µs to 2 ms to process it (one in
// fifty: up to 300 ms), with AutoCommit.
//
// Faults: a crash kills the process's ports at once (nothing it does
// afterwards is seen) and ends the consumer as a killed process
// (drillhooks' crash: no commit, no release, no leave); the process
// restarts with its id or a fresh one. A leave is Consumer.Close (the
// round under way finishes, partitions released, the member record
// deleted); the process rejoins later under a fresh id. KV cut-offs cut
// one process off the KV.
//
// What the bubble cannot give the member: skewed or drifting clocks. Its
// timers and time.Now are the bubble's, the simulation's true time, so
// the member's clock rate is exact (GroupConfig.Drift applies to nothing
// now, and Skew only to its readers' clocks). Liveness compares the
// others' record revisions on the member's own clock, so skew never
// mattered to it; drift mattered only within the quarter session
// PauseAfter leaves.
//
// There is one partition, so the group's assignment moves it whole; the
// checks are in group_check.go.

const (
	memberPoll   = 25 * int64(time.Millisecond) // actors.DefaultReaderPoll
	groupTopic   = "sim"
	groupName    = "g"
	memberPrefix = "g.sim.m."
	posPrefix    = "g.sim.p."
	groupTick    = 100 * int64(time.Millisecond) // how often the loop looks whether the group is done
	// autoCommitOffset is added to every member's AutoCommit, so its
	// ticker never fires at the instant the round's (GroupInterval) does,
	// where the member's select would choose at random.
	autoCommitOffset = 1237 * time.Nanosecond
)

// memberRec is a member's heartbeat record (meta.GroupMember).
type memberRec struct {
	heartbeat int64 // the member's clock (unix ns)
	session   int64
}

// member is one member process slot (its id changes when it restarts
// under a fresh one). Loop-owned.
type member struct {
	g    *group
	s    *sim
	slot int
	name string // the process, for KV cut-offs and the log: "s0"
	id   string // the member id: "m0a3f", then "m0b1c" after a restart under a fresh id, ...
	skew int64  // its readers' clock offset
	inc  *minc  // the running process; nil while down
	runs int

	up      bool             // a process runs
	leaving bool             // Close under way
	paused  bool             // by its log: delivery paused
	parts   map[int]*holding // the running process's partition readers not closed
}

// minc is one member process: its consumer and its ports.
type minc struct {
	m        *member
	proc     // tag "m0a3f#2"
	id       string
	appCalls atomic.Uint64
	rnd      *rand.Rand    // the application's processing times (the app goroutine only)
	ready    chan struct{} // closed once the consumer started (or failed to)

	mu      sync.Mutex
	cons    *raidq.Consumer
	crashFn func()
	killReq bool

	// Loop-owned, for the checks.
	last     map[int]*holding // its last reader of each partition
	released map[int]bool     // released the partition since its last write naming itself
}

// think is how long the application takes over one message.
func (in *minc) think() time.Duration {
	if in.rnd.IntN(50) == 0 {
		return time.Duration(1000 + in.rnd.Int64N(300*int64(time.Millisecond)))
	}
	return time.Duration(1000 + in.rnd.Int64N(2*int64(time.Millisecond)))
}

// join starts a member process.
func (m *member) join() {
	s, g := m.s, m.g
	if g.done {
		return
	}
	m.runs++
	in := &minc{m: m, proc: newProc(sprintf("%s#%d", m.id, m.runs)), id: m.id, ready: make(chan struct{}),
		rnd: rand.New(rand.NewPCG(s.rnd.Uint64(), 0x9a)), last: map[int]*holding{}, released: map[int]bool{}}
	g.incs = append(g.incs, in)
	m.inc, m.up, m.leaving, m.paused, m.parts = in, true, false, false, map[int]*holding{}
	s.log.add("%s JOINS as %s (%s, readers' clock %s, session %v)", m.name, m.id, in.tag, s.log.skew(m.skew), s.cfg.Group.Session)
	ports := drillhooks.GroupPorts{KV: in, Catalog: g.catalog, NewReader: in.NewReader, Logger: in.logger(),
		Topic: groupTopic, Group: groupName, Member: m.id, From: time.Unix(0, int64(s.readerStart())),
		Session: s.cfg.Group.Session, AutoCommit: s.cfg.Group.AutoCommit + autoCommitOffset, Bugs: s.groupBugs()}
	s.bubble.wg.Go(func() { in.app(ports) })
}

// app is the application of one process: start the consumer, then take
// messages until it ends.
func (in *minc) app(ports drillhooks.GroupPorts) {
	b := in.m.s.bubble
	c, crash, err := drillhooks.GroupConsumer(ports)
	if err != nil {
		close(in.ready)
		b.postLog(in.tag, "start failed: "+err.Error(), func() { in.m.s.log.add("%s: start failed: %v", in.tag, err) })
		return
	}
	cons := c.(*raidq.Consumer)
	in.mu.Lock()
	in.cons, in.crashFn = cons, crash
	kill := in.killReq || in.isDead()
	in.mu.Unlock()
	close(in.ready)
	if kill {
		crash()
		return
	}
	for {
		msg, err := cons.Next(context.Background())
		if err != nil {
			return
		}
		d := gdelivery{value: string(msg.Value), id: msg.Stripe, pos: core.Position{Offset: msg.Position.Offset, Index: msg.Position.Index},
			at: b.trueNow(), member: in.id, p: msg.Partition, late: msg.Late}
		b.post(in.tag+".app", in.appCalls.Add(1), func() { in.m.g.deliver(in, d) })
		time.Sleep(in.think())
	}
}

// kill ends the process's consumer as a killed process (off the loop).
func (in *minc) kill() {
	in.mu.Lock()
	in.killReq = true
	fn := in.crashFn
	in.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// down forgets the running process on the loop: its readers stop at once.
func (m *member) down(in *minc) {
	for _, h := range in.last {
		h.stop()
	}
	if m.inc == in {
		m.inc, m.up, m.leaving, m.paused = nil, false, false, false
		m.parts = map[int]*holding{}
	}
}

// crash kills the member process (false if none runs): its ports die at
// once, its consumer ends as a killed process's.
func (m *member) crash() bool {
	s, in := m.s, m.inc
	if in == nil {
		return false
	}
	in.die()
	m.down(in)
	s.res.MemberCrashes++
	s.log.add("%s (%s) CRASHES", m.name, in.tag)
	s.bubble.wg.Go(in.kill)
	return true
}

// leave is Consumer.Close, from a goroutine of the process; once it
// returns the process is gone.
func (m *member) leave() bool {
	s, in := m.s, m.inc
	if in == nil || m.leaving {
		return false
	}
	m.leaving = true
	s.log.add("%s LEAVES the group (Close)", in.tag)
	s.bubble.wg.Go(func() {
		select {
		case <-in.ready:
		case <-in.dead:
			return
		}
		in.mu.Lock()
		cons := in.cons
		in.mu.Unlock()
		if cons != nil {
			_ = cons.Close()
		}
		s.bubble.post(in.tag+".app", in.appCalls.Add(1), func() {
			if in.isDead() {
				return
			}
			in.die()
			m.down(in)
			s.log.add("%s has left", in.tag)
		})
	})
	return true
}

// groupBugs are the shipped member's re-created mistakes for this run.
func (s *sim) groupBugs() drillhooks.GroupBugs {
	b := s.cfg.inject.group
	gaps := s.cfg.Group.Gaps
	b.RoundPause = b.RoundPause || gaps&GapRoundPause != 0
	b.KeepOrphans = b.KeepOrphans || gaps&GapKeepOrphans != 0
	b.StaleHold = b.StaleHold || gaps&GapStaleHold != 0
	b.ResumeBlind = b.ResumeBlind || gaps&GapResumeBlind != 0
	return b
}

// stopGroup ends every member process still running (the run's end).
func (s *sim) stopGroup() {
	g := s.group
	if g == nil || s.bubble == nil {
		return
	}
	for _, in := range g.incs {
		in.die()
		s.bubble.wg.Go(in.kill)
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

var _ meta.GroupKV = (*minc)(nil)
