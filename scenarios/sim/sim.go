package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// Simulation constants: the parts of the scenario no seed varies.
const (
	epoch0      = int64(1_700_000_000) * int64(time.Second) // simulated wall clock at start
	writeStart  = 50 * int64(time.Millisecond)              // producers start this long after epoch0
	tickEvery   = 10 * int64(time.Millisecond)              // producer Writer.Tick period
	pollEvery   = 20 * int64(time.Millisecond)              // reader wake-up when it has nothing to scan
	scanTimeout = 400 * int64(time.Millisecond)             // a scan waits this long for its nodes (> 2x slowest hop)
	// suspectTimeout: the wait for a node whose last scan timed out, until
	// it answers again (the reader actor's SuspectTimeout, 150 ms).
	suspectTimeout = 150 * int64(time.Millisecond)
	runLimit       = 60 * int64(time.Second) // a run that has not finished by then is stuck
	maxReported    = 30                      // violations kept per run
	// afterRun: a bubbled run waits this long after its end for the
	// stopped drivers' last timers (reader.go).
	afterRun = 3 * time.Second
)

// sim is one run: the world, its clock and its event queue.
type sim struct {
	cfg    Config
	params quorum.Params
	alter  *alter // a topic alter under way (alter.go)
	rnd    *rand.Rand
	now    int64 // true simulated time (ns); actors see it through their skewed clocks
	seq    uint64
	q      eventQueue
	log    logger

	// system is the actor system every client process of the run shares
	// (a bubbled run): making one per process cost a fifth of the run.
	system *actors.System

	nodes   []*node
	byName  map[string]*node // nodes by name (routeNode)
	prods   []*producer
	readers []*reader
	truth   *truth

	kv    *kvStore  // the metadata KV (kv.go)
	lease *leaseRun // the fan-out lease holders (lease.go), if any
	kafka *kafkaRun // the Kafka gateways' group coordinators (kafka_group.go), if any
	// bubble runs the shipped drivers (bubble.go); nil when the run has none.
	bubble *bubble
	group  *group // the consumer group (group.go), if any

	lossWindows []window // quorum-loss windows (outage.go)
	outages     []outage // every planned node outage (outage.go)

	repair *repairRun // the nodes' repair loops (repair.go), if Config.RepairEvery > 0
	healed bool       // the end of a repair run: no message is lost any more

	prodsLeft   int    // producers with stripes still in flight
	readersLeft int    // readers not yet past the end
	end         uint64 // once prodsLeft == 0: one past the highest offset any attempt used
	res         Result
}

// Run plays one scenario and checks it. The same Config gives the same
// Result, log included. A scenario with shipped drivers (the fan-out
// lease holders, the nodes' repair loops, the group members, the Kafka
// group coordinators) runs in a testing/synctest bubble under t
// (bubble.go).
func Run(t *testing.T, cfg Config) Result {
	if cfg.Readers > 0 || cfg.Producers > 0 { // the shipped readers and producers (reader.go, producer.go)
		var res Result
		synctest.Test(t, func(*testing.T) {
			res = run(cfg, newBubble())
			// The closed clients' timers still due (protoactor's dead-letter
			// throttle, a second) fire before the bubble must be empty.
			time.Sleep(afterRun)
		})
		return res
	}
	if !cfg.bubbled() && !cfg.repairBubbled() && cfg.Group.Members == 0 {
		return run(cfg, nil)
	}
	var res Result
	synctest.Test(t, func(*testing.T) { res = run(cfg, newBubble()) })
	return res
}

func run(cfg Config, b *bubble) Result {
	s := newSim(cfg)
	s.bubble = b
	if b != nil {
		s.system = actors.NewSystem(quietLog)
	}
	defer s.stopDrivers()
	if err := s.params.Validate(); err != nil {
		s.violate("bad config: %v", err)
		return s.res
	}
	s.schedule()
	s.loop()
	s.stopReaders()   // a stuck run's readers (reader.go)
	s.stopProducers() // and producers (producer.go)
	s.finishRepair()
	s.check()
	s.res.SimTime = time.Duration(s.now - epoch0)
	s.res.Log = s.log.lines()
	return s.res
}

func newSim(cfg Config) *sim {
	p, err := quorum.Profile(cfg.Latency)
	if err != nil {
		panic(fmt.Sprintf("sim config: %v", err))
	}
	p.N, p.K, p.W, p.Grid = cfg.Nodes, cfg.K, cfg.W, cfg.Grid
	s := &sim{cfg: cfg, params: p, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x7a1d)), now: epoch0, truth: newTruth()}
	s.kv = newKV(s)
	s.log.s = s
	s.res.Config = cfg
	return s
}

// schedule builds the world and queues its first events.
func (s *sim) schedule() {
	slow := s.rnd.Perm(s.cfg.Nodes)[:min(s.cfg.SlowNodes, s.cfg.Nodes)]
	common := s.skew(s.cfg.NodeOffset) // no draw when off: older configs replay as before
	for i := range s.cfg.Nodes {
		s.nodes = append(s.nodes, newNode(s, i, common+s.skew(s.cfg.NodeSkew), contains(slow, i)))
	}
	s.log.add("start %s", s.cfg)
	shared := s.skew(s.cfg.ProducerSkew) / 4 // conflict mode: one modest skew for all
	for i := range s.cfg.Producers {
		skew := s.skew(s.cfg.ProducerSkew)
		if s.cfg.ConflictQuantum > 0 {
			skew = shared
		}
		s.prods = append(s.prods, newProducer(s, i, skew))
	}
	for i := range s.cfg.Readers {
		skew := s.skew(s.cfg.ReaderSkew)
		if i == 0 {
			skew += int64(s.cfg.FastReader)
		}
		s.readers = append(s.readers, newReader(s, i, skew))
	}
	s.logClocks(common)
	s.prodsLeft, s.readersLeft = len(s.prods), len(s.readers)
	for _, p := range s.prods {
		p.schedule()
	}
	for _, r := range s.readers {
		r.wakeAt(s.now + int64(s.cfg.ReaderLate))
	}
	s.scheduleCrashes()
	s.scheduleReaderRestarts()
	if s.cfg.Group.Members > 0 || s.cfg.Lease.Holders > 0 {
		s.planKVFaults(s.now+writeStart, s.now+s.faultSpan()+int64(4*time.Second))
	}
	if s.cfg.Lease.Holders > 0 {
		s.scheduleLease()
	}
	if s.cfg.Kafka.Gateways > 0 {
		s.scheduleKafka()
	}
	if s.cfg.Group.Members > 0 {
		s.scheduleGroup()
	}
	s.scheduleRepair()
	s.scheduleAlter()
}

// running reports whether anything is still to finish.
func (s *sim) running() bool {
	return s.prodsLeft > 0 || s.readersLeft > 0 || (s.lease != nil && !s.lease.done) || (s.group != nil && !s.group.done) ||
		(s.kafka != nil && !s.kafka.done)
}

// loop runs events until every producer and reader is done or the run is
// stuck.
func (s *sim) loop() {
	for s.running() {
		if s.bubble != nil && !s.bubbleStep() {
			continue
		}
		e := s.next()
		if e == nil {
			s.violate("no events left with %d producers and %d readers unfinished (group or lease unfinished: %v)", s.prodsLeft, s.readersLeft,
				s.prodsLeft == 0 && s.readersLeft == 0)
			return
		}
		if e.at-epoch0 > s.runLimit() {
			s.stuck()
			return
		}
		s.now = e.at
		e.fn()
	}
}

// runLimit is when a run that has not finished is stuck: runLimit, or
// later when the Kafka part is planned to end later (kafka_group.go).
func (s *sim) runLimit() int64 {
	if s.kafka != nil {
		return max(runLimit, s.kafka.end-epoch0+int64(5*time.Second))
	}
	return runLimit
}

// stuck reports who did not finish in time.
func (s *sim) stuck() {
	for _, p := range s.prods {
		if !p.done {
			s.violate("producer p%d stuck with %d batches without an outcome", p.id, p.inFlight())
		}
	}
	if g := s.group; g != nil && !g.done {
		for _, m := range g.slots {
			h := m.parts[0]
			switch {
			case !m.up:
				s.violate("group stuck: %s (%s) down", m.name, m.id)
			case h == nil:
				s.violate("group stuck: %s holds nothing (paused %v)", m.id, m.paused)
			default:
				s.violate("group stuck: %s holds p0 at %s (paused %v, %d waiting, %d in doubt, low water %s)", m.id,
					s.log.pos(h.r.r.Pos()), m.paused, len(h.pending), h.r.r.Deferred(), s.log.pos(h.r.r.LowWater()))
			}
		}
	}
	for _, r := range s.readers {
		if !r.done {
			s.violate("reader r%d stuck at %s (frontier %s, end %s, %d in-doubt offsets deferred, low water %s)", r.id,
				s.log.pos(r.r.Pos()), s.log.off(r.r.Frontier()), s.log.off(s.end), r.r.Deferred(), s.log.pos(r.r.LowWater()))
		}
	}
}

// producerDone is called once per producer when its last stripe is done.
func (s *sim) producerDone() {
	s.prodsLeft--
	if s.prodsLeft == 0 {
		s.end = s.truth.maxOffset + 1
		s.log.add("all producers done; readers run to %s", s.log.off(s.end))
	}
}

// skew draws a clock offset in [-limit, limit].
func (s *sim) skew(limit time.Duration) int64 {
	if limit <= 0 {
		return 0
	}
	return s.rnd.Int64N(2*int64(limit)+1) - int64(limit)
}

// send delivers fn after a network hop (plus the slow node's extra delay),
// unless the message is lost.
func (s *sim) send(slow bool, what func() string, fn func()) {
	if s.rnd.Float64() < s.cfg.DropRate && !s.healed {
		s.res.Drops++
		s.log.add("drop %s", what())
		return
	}
	d := 100_000 + s.rnd.Int64N(4_900_000)
	if slow {
		d += 50_000_000 + s.rnd.Int64N(100_000_001)
	}
	s.at(s.now+d, fn)
}

func (s *sim) violate(format string, args ...any) {
	if len(s.res.Violations) == maxReported {
		s.res.Violations = append(s.res.Violations, "... more violations not listed")
	}
	if len(s.res.Violations) > maxReported {
		return
	}
	s.res.Violations = append(s.res.Violations, sprintf(format, args...))
	s.log.add("VIOLATION "+format, args...)
}

// truth is what the producers really did, for the checks.
type truth struct {
	values    map[stripe.ID][]string // records of every stripe sent
	byValue   map[string]stripe.ID
	acked     map[stripe.ID]uint64
	failed    map[stripe.ID]error
	offsets   map[stripe.ID][]uint64 // every offset an attempt used
	started   map[stripe.ID]int64    // true time of the first attempt
	ended     map[stripe.ID]int64    // true time of the Ack or Fail
	maxOffset uint64
}

func newTruth() *truth {
	return &truth{values: map[stripe.ID][]string{}, byValue: map[string]stripe.ID{}, acked: map[stripe.ID]uint64{},
		failed: map[stripe.ID]error{}, offsets: map[stripe.ID][]uint64{},
		started: map[stripe.ID]int64{}, ended: map[stripe.ID]int64{}}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
