package sim

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"

	nodepkg "github.com/raidq/raidq/actors/node"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// Repair (docs/design.md#repair-and-scrub), as shipped. With
// Config.RepairEvery set, every node runs actors/node's repair loop
// itself (node.RepairLoop: maintenance.repairPass with its queued
// targets, core.RepairSpans and the walk as core.RepairWalk decides,
// PlanRange, prefetch, rebuild with RebuildShard's proof, the in-doubt
// re-append's decisions, the saved marks and holes), RepairEvery as its
// Interval, in the bubble (bubble.go). Its ports (repair_ports.go) are
// the simulated node: its durable slots and its marks and holes (made
// durable with the node's group commit), peer scans and shard fetches
// as simulated messages with the sim's delays, drops and crashes (a
// peer not answering within scanTimeout times out and is dead for the
// rest of the walk; a fail-fast one answers "no responders"), the
// owner's RepairWrite (still a copy: core.Owner.RepairWrite, durable
// with the node's group commit, answered once durable), the node's
// skewed clock, a meta.StaticCatalog of the sim's topic, and the
// in-doubt reports and hand-overs as lossy messages to every node. The
// writing of a re-append (actors.Client.Reappend) is still a copy
// (reappend.go). A crash kills the process's ports at once (every call
// it makes from then on fails, nothing it logs is heard); the restart
// starts a fresh loop, which loads the durable marks. A wipe loses the
// marks too. A reborn node's owners learn the repaired mark and holes
// before every scan (Owner.SetRepaired, as the owner actor's
// refreshRepaired): below the mark they answer, not "unknown".
//
// At the end (finishRepair) every outage is over, the network stops
// losing messages and the passes run until every node's repair horizon
// is past every offset written, plus a few passes. The checks
// (repair_check.go): every acked stripe then has n shards (at its acked
// offset, or a full copy at another offset it was written at: a rewrite
// or a re-append), except where the missing slot holds another stripe's
// shard (write-once: counted, RepairConflicts) and stripes a wipe left
// with fewer than k shards; every shard repair writes is exactly the
// shard its producer would have sent there (re-encoded from the truth:
// RebuildShard's proof, checked independently); repair writes go through
// the write-once checks of node.go (a slot accepted twice, a durable
// slot overwritten).
//
// Not modelled: the clock watch (ClockOff is always false, so its skip
// of a pass never happens; core.BeyondHorizon in the walk does run, on
// the peers' clocks in their scan replies), scrub and corrupt targets
// (the simulated disks do not rot), retention. The repair rate limit
// runs but never binds. InDoubtKeep is scaled down (inDoubtKeep).

// Repair constants (node.RepairConfig where they differ from its defaults).
const (
	repairWindow = 10 * time.Minute // RepairConfig.Window: the whole run
	repairMargin = int64(time.Second)
	// inDoubtKeep is RepairConfig.InDoubtKeep scaled to the simulation
	// (1 h in raidq): an in-doubt target that never becomes decodable is
	// given up after this long (an offset a wipe left unknown for good).
	inDoubtKeep = 10 * time.Second
	finalPasses = 4 // passes run once the horizon is past every write
	// finalLimit bounds the end of a repair run past its planned end, while
	// passes still write.
	finalLimit = 60 * int64(time.Second)
	// simTopic is the simulated partition's topic.
	simTopic = "sim"
)

// repairRun is the repair state of every node.
type repairRun struct {
	nodes     []*repairer
	catalog   *meta.StaticCatalog
	payloads  map[stripe.ID][]byte // the truth's payloads, for the proof check
	lastWrite int64                // true time of the last repair write or re-append
	from      int64                // finishRepair: every horizon is past every write from then on
	wrote     map[repairSlot]int64 // when repair wrote each slot it wrote (progress.go)
	procs     []*repairProc        // every process that ran
}

// settled reports whether every node completed finalPasses passes since
// from, the last of them started after the last write.
func (rr *repairRun) settled() bool {
	for _, r := range rr.nodes {
		if r.finals < finalPasses || !r.clean {
			return false
		}
	}
	return true
}

// repairer is one node's repair across its processes.
type repairer struct {
	s *sim
	n *node
	// Durable (the store's marks and holes): kept across crashes, lost
	// with a wipe (inc).
	inc                         int
	repaired, verified, dropped uint64
	holes                       []uint64
	proc                        *repairProc // the running process
	runs                        int
	// The end of the run (finishRepair): passes completed that started
	// once every horizon was past every write, and whether the last one
	// started after the last repair write or re-append anywhere.
	finals int
	clean  bool
}

// withRepair turns the repair loop on for about one seed in three, from a
// random stream of its own (every older knob keeps its value for a seed).
func withRepair(c Config, seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0x4e9a))
	on, every := r.IntN(3) == 0, []time.Duration{300 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond}[r.IntN(3)]
	if on {
		c.RepairEvery = every
	}
	return c
}

// repairBubbled: a run with repair runs the shipped repair loop in the
// bubble (Run).
func (c Config) repairBubbled() bool { return c.RepairEvery > 0 }

// nodeName is node i's id in the topic's ensemble.
func nodeName(i int) string { return sprintf("n%d", i) }

// scheduleRepair starts every node's repair loop.
func (s *sim) scheduleRepair() {
	if s.cfg.RepairEvery <= 0 {
		return
	}
	s.repair = &repairRun{payloads: map[stripe.ID][]byte{}, wrote: map[repairSlot]int64{}, catalog: meta.NewStaticCatalog()}
	s.refreshCatalog()
	every := int64(s.cfg.RepairEvery)
	for _, n := range s.nodes {
		r := &repairer{s: s, n: n}
		s.repair.nodes = append(s.repair.nodes, r)
		s.at(s.now+writeStart+s.rnd.Int64N(every), r.start) // each at its own phase
	}
}

// refreshCatalog puts the sim's topic, as the simulation's params say now
// (an alter changes them), into the repair catalog.
func (s *sim) refreshCatalog() {
	p := s.params
	// During an alter (alter.go) the read delay may follow the new accept
	// window before the window does; repair uses neither (only D, through
	// its horizon), so the catalog's window is clamped to stay valid.
	p.AcceptWindow = min(p.AcceptWindow, p.ReadDelay)
	if t, err := s.repair.catalog.Topic(simTopic); err == nil && t.Params == p {
		return
	}
	ens := make([]string, s.cfg.Nodes)
	for i := range ens {
		ens[i] = nodeName(i)
	}
	t := &meta.Topic{Name: simTopic, Partitions: 1, Params: p, Ensembles: [][]string{ens}, Created: s.topicCreated()}
	if err := s.repair.catalog.Put(t); err != nil {
		s.violate("repair: the topic's params do not validate: %v", err)
	}
}

// startRepair is called at the node's start-up (startFloor): a restarted
// node starts a fresh repair loop.
func (n *node) startRepair() {
	s := n.s
	if s.repair == nil {
		return
	}
	r := s.repair.nodes[n.id]
	s.at(s.now, r.start)
}

// sync drops the marks a wipe lost.
func (r *repairer) sync() {
	if r.inc != r.n.inc {
		r.inc, r.repaired, r.verified, r.dropped, r.holes = r.n.inc, 0, 0, 0, nil
	}
}

// start kills the process of an earlier life, if still there, and starts
// the shipped repair loop for the node's current life.
func (r *repairer) start() {
	s, n := r.s, r.n
	if r.proc != nil {
		if r.proc.epoch == n.epoch && n.up {
			return // already running for this life
		}
		r.proc.die()
		r.proc = nil
	}
	if !n.up || s.repair.from < 0 {
		return
	}
	r.sync()
	s.refreshCatalog()
	r.runs++
	p := &repairProc{r: r, tag: sprintf("n%d.r%d", n.id, r.runs), epoch: n.epoch, birth: n.birth, dead: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	loop, err := nodepkg.NewRepairLoop(nodepkg.RepairLoopConfig{
		Repair: nodepkg.RepairConfig{Interval: s.cfg.RepairEvery, Window: repairWindow, Margin: time.Duration(repairMargin),
			RequestTimeout: time.Duration(scanTimeout), InDoubtKeep: inDoubtKeep, ScrubInterval: -1, RetentionInterval: -1,
			Bugs: nodepkg.RepairBugs{SkipFix: s.cfg.inject.repairSkipFix, NoProof: s.cfg.inject.repairNoProof,
				NoLocal: s.cfg.inject.repairReplace}},
		Ports: p, Cluster: "sim", Logger: p.logger(), Passed: p.passed})
	if err != nil {
		panic(sprintf("sim: repair loop: %v", err))
	}
	r.proc = p
	s.repair.procs = append(s.repair.procs, p)
	s.log.add("n%d starts its repair loop (%s)", n.id, p.tag)
	s.bubble.wg.Go(func() { loop.Run(ctx) })
}

// stopRepair ends every repair process (the run's end).
func (s *sim) stopRepair() {
	if s.repair == nil {
		return
	}
	s.repair.from = -1 // no more starts
	for _, p := range s.repair.procs {
		p.die()
	}
}

// finishRepair ends a repair run: once every outage is over, the network
// heals and the passes run until every node's horizon is past every
// offset written, and then until every node completed finalPasses passes
// since, the last of them started after the last repair write or
// re-append anywhere (within finalLimit). It ends every repair process.
func (s *sim) finishRepair() {
	defer s.stopRepair()
	if s.repair == nil || s.running() {
		return // no repair, or stuck (reported)
	}
	s.healed = true
	last := s.now
	for _, o := range s.outages {
		last = max(last, o.end)
	}
	high := s.truth.maxOffset
	for _, offs := range s.truth.offsets {
		for _, o := range offs {
			high = max(high, o)
		}
	}
	hz := int64(s.params.ReadDelay) + repairMargin
	until := last
	for _, n := range s.nodes {
		until = max(until, int64(high)+hz-n.skew+int64(time.Millisecond))
	}
	s.repair.from = until
	s.log.add("repair: healed; every horizon past every write from %s", s.log.at(until))
	limit := until + finalLimit
	s.at(limit+1, func() {}) // the repair loops run on timers: keep the clock going up to the limit
	for !s.repair.settled() {
		if s.bubble != nil && !s.bubbleStep() {
			continue
		}
		e := s.next()
		if e == nil || e.at > limit {
			var st []string
			for _, r := range s.repair.nodes {
				st = append(st, sprintf("n%d: %d passes, clean %v", r.n.id, r.finals, r.clean))
			}
			s.violate("repair: passes did not settle within %v of %s (%s)", time.Duration(finalLimit), s.log.at(until), strings.Join(st, "; "))
			break
		}
		s.now = e.at
		e.fn()
	}
	s.log.add("repair: settled")
	for _, n := range s.nodes {
		if !n.up {
			s.violate("repair: n%d still down at the end", n.id)
		}
	}
}

// passed counts a pass that ran to its end (on the loop).
func (r *repairer) passed(start int64) {
	s := r.s
	s.res.RepairPasses++
	if s.repair.from > 0 && start >= s.repair.from {
		r.clean = start > s.repair.lastWrite
		r.finals++
	}
}

func (r *Result) repairSummary() string {
	if r.Config.RepairEvery <= 0 {
		return ""
	}
	return sprintf(" repair-passes=%d repaired=%d repair-conflicts=%d reappended=%d holes=%d",
		r.RepairPasses, r.RepairedShards, r.RepairConflicts, r.Reappended, r.Holes)
}
