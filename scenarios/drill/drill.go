// Package drill runs failure drills against real `raidq node` processes
// and checks, in the spirit of Jepsen's "total queue" workload, that
// nothing acknowledged is lost.
//
// A drill builds the raidq binary (or uses Config.Binary), starts six node
// processes (scenarios/cluster), creates a topic, and runs several
// producers in this process through the raidq Go client: each send
// carries a unique value (producer, sequence number, send time) and is
// recorded as attempted, then acked, failed (the client said why) or
// unknown (a timeout, or no answer by the end: it may have committed). A
// schedule of faults runs meanwhile (kill, pause, slow nodes, a network
// partition, corruption, a wiped disk, clock skew, ...). After the load
// the drill heals every fault, reads everything back from the start with
// a raidq.Consumer and checks the history:
//
//   - lost: acked, never delivered (must be 0);
//   - unexpected: delivered, never sent (must be 0);
//   - duplicates: delivered more than once (reported);
//   - recovered: failed or unknown, delivered anyway (reported: allowed);
//   - reordered: per producer and partition, delivered out of send order
//     (reported: a retried stripe lands at a later offset);
//   - in_doubt: offsets the readers gave up on (ConsumerOptions.OnReport).
//
// Two readers also run through the faults: an in-process live reader
// (live.go) and a live consumer group of two `raidq consume --group`
// processes (group.go); each must deliver every acked record, and no
// group member may exit by itself. The kafka drill (kafka.go) writes and
// reads with kgo through two `raidq kafka` gateway processes instead.
//
// For every lost record the drill stops the nodes and opens each node's
// slot store to list which node holds which shard of the record's stripe
// around its offset.
//
// Run(ctx, Config{Scenario: "kill-2"}) returns a Report; Scenarios lists
// the scenarios. `raidq drill NAME` is the command line.
package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/metrics"
)

// Topic is the topic every drill writes to.
const Topic = "drill"

// Config are a drill's knobs (the flags of `raidq drill`).
type Config struct {
	Scenario string
	Seed     uint64
	// Duration of the load (default 30s; the hang scenario 45s, see
	// DefaultDuration). Faults are placed at fractions of it.
	Duration time.Duration
	// Rate is the total send rate in messages per second over all
	// producers (default 1000).
	Rate int
	// Producers is the number of producers (default 4; the conflict
	// scenario uses at least 16).
	Producers int
	// Size of each message in bytes (default 256; at least 64).
	Size int
	// Partitions of the drill topic (default 4).
	Partitions int
	// Latency is the drill topic's latency profile (raidq.ProfileParams:
	// "" or "default", or "low").
	Latency string
	// Window bounds the sends in flight per producer (default 512).
	Window int
	// Binary is the raidq binary; empty builds ./cmd/raidq.
	Binary string
	// Dir is where the nodes keep their data (Dir/<id>); empty: a
	// temporary directory, removed afterwards unless Keep.
	Dir  string
	Keep bool
	// Out, if set, receives <scenario>-seed<N>.png (ack latency over time
	// with the faults marked), .jsonl (the full history) and .json (the
	// report).
	Out string
	// Drain bounds the read-back after the load (default 60s).
	Drain time.Duration
	// NoSync runs the nodes with --no-fsync.
	NoSync bool
	// NodeLogLevel is the nodes' --log-level (default warn); their stderr
	// is kept in memory and its tail shown when a node misbehaves.
	NodeLogLevel string
	// Logger receives the drill's own progress (faults, phases); nil: none.
	Logger *slog.Logger
	// ClientLogger receives the raidq clients' logs; nil: none.
	ClientLogger *slog.Logger
	// Progress, if set, is called about every 200ms.
	Progress func(Progress)
	// Docker runs the nodes as containers instead of processes (docker.go).
	Docker *DockerConfig
	// RepairInterval is the nodes' --repair-interval (default 2s, so the
	// drill sees repair finish soon after the load; nodes default to 10s).
	RepairInterval time.Duration
	// RepairWait bounds the wait for full redundancy after the read-back
	// (default 90s).
	RepairWait time.Duration
}

// Progress is what a drill is doing now.
type Progress struct {
	Phase    string // starting, load, healing, draining, group, repairing, checking
	Elapsed  time.Duration
	Duration time.Duration
	Acked    int
	Failed   int
	Pending  int
	Expected int // during draining and group: acked records to deliver
	Got      int // during draining and group: distinct records delivered so far
}

// Event is one thing the drill did or saw (a fault, a heal, a node that
// exited by itself), at T seconds since the load started.
type Event struct {
	T    float64 `json:"t_s"`
	Kind string  `json:"kind"` // fault, heal, info, error
	What string  `json:"what"`
}

// Check is one expectation of a scenario.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Report is a drill's result (the JSON of `raidq drill --json`).
type Report struct {
	Scenario        string         `json:"scenario"`
	Seed            uint64         `json:"seed"`
	Backend         string         `json:"backend"`
	DurationS       float64        `json:"duration_s"`
	Rate            int            `json:"rate_msgs_s"`
	Producers       int            `json:"producers"`
	Attempted       int            `json:"attempted"`
	Acked           int            `json:"acked"`
	FailedSends     int            `json:"failed_sends"`
	Unknown         int            `json:"unknown"`
	Delivered       int            `json:"delivered"`
	Lost            int            `json:"lost"`
	Unexpected      int            `json:"unexpected"`
	Duplicates      int            `json:"duplicates"`
	Recovered       int            `json:"recovered"`
	Reordered       int            `json:"reordered"`
	InDoubt         int            `json:"in_doubt"`
	AckP50Ms        float64        `json:"ack_p50_ms"`
	AckP99Ms        float64        `json:"ack_p99_ms"`
	AckP999Ms       float64        `json:"ack_p999_ms"`
	AckMaxMs        float64        `json:"ack_max_ms"`
	LongestAckGapMs float64        `json:"longest_ack_gap_ms"`
	AckedPerS       float64        `json:"acked_per_s"`
	Conflicts       int            `json:"conflicts"`
	Retries         int            `json:"retries"`
	Rewrites        int            `json:"rewrites"`
	Errors          map[string]int `json:"errors,omitempty"`
	FirstError      string         `json:"first_error,omitempty"`
	// ErrorSamples holds the first message of each error class.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	Nodes        []string          `json:"nodes"`
	Faulted      []string          `json:"faulted,omitempty"`
	Events       []Event           `json:"events"`
	NodeExits    []string          `json:"node_exits,omitempty"`
	Checks       []Check           `json:"checks"`
	LostRecords  []LostRecord      `json:"lost_records,omitempty"`
	// Live is what a second consumer saw that read during the faults.
	Live *LiveReport `json:"live,omitempty"`
	// Group is what the live consumer group's member processes delivered
	// (group.go), or in the kafka drill the kgo group's members (kafka.go).
	Group *GroupReport `json:"group,omitempty"`
	// Kafka is what the kafka drill's gateways and kgo clients did.
	Kafka *KafkaReport `json:"kafka,omitempty"`
	// ShardsAtEnd counts the acked stripes by how many good shards of
	// them the nodes hold after the drill, at their acked offset or at a
	// full copy elsewhere (a rewrite or re-append), whichever holds more
	// ("6": full redundancy; "4" = k: one more loss and the stripe is gone).
	ShardsAtEnd map[string]int `json:"shards_at_end,omitempty"`
	// Repair is what the nodes' repair loops reported (repair.go).
	Repair *RepairReport `json:"repair,omitempty"`
	// Phases: ack latency before the first fault, while faults were in
	// place, and after the last heal (sends by the time they were made).
	Phases []PhaseStats `json:"phases,omitempty"`
	Notes  []string     `json:"notes,omitempty"`
	DrainS float64      `json:"drain_s"`
	// LoadAvg is the machine's 1-minute load average when the load
	// started and ended (Linux; the drills share the machine's CPUs).
	LoadAvg []float64 `json:"load_avg,omitempty"`
	Files   []string  `json:"files,omitempty"`
	// Skipped says why the drill did not run here (OK is then true and
	// nothing was measured), e.g. isolate without root and iptables.
	Skipped string `json:"skipped,omitempty"`
	OK      bool   `json:"ok"`
}

// skipError: the drill cannot run on this machine; Run returns a Report
// with Skipped set to reason.
type skipError struct{ reason string }

func (e *skipError) Error() string { return "skipped: " + e.reason }

// DefaultDuration is a scenario's load duration when Config.Duration is
// not set (30s; hang 45s, so the load goes on after its 30s stop).
func DefaultDuration(name string) time.Duration {
	if s, ok := scenarioByName(name); ok && s.duration > 0 {
		return s.duration
	}
	return 30 * time.Second
}

func (c *Config) defaults() error {
	if c.Duration <= 0 {
		c.Duration = DefaultDuration(c.Scenario)
	}
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	if c.Producers <= 0 {
		c.Producers = 4
	}
	if c.Size <= 0 {
		c.Size = 256
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.RepairInterval <= 0 {
		c.RepairInterval = 2 * time.Second
	}
	if c.RepairWait <= 0 {
		c.RepairWait = 90 * time.Second
	}
	if c.Window <= 0 {
		c.Window = 512
	}
	if c.Drain <= 0 {
		c.Drain = 60 * time.Second
	}
	if c.NodeLogLevel == "" {
		c.NodeLogLevel = "warn"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ClientLogger == nil {
		c.ClientLogger = slog.New(slog.DiscardHandler)
	}
	if _, ok := scenarioByName(c.Scenario); !ok {
		return fmt.Errorf("unknown drill %q (known: %s)", c.Scenario, strings.Join(Names(), ", "))
	}
	switch {
	case c.Size < 64 || c.Size > 1<<20:
		return fmt.Errorf("--size %d: must be 64..1048576 bytes", c.Size)
	case c.Duration < time.Second:
		return fmt.Errorf("--duration %s: must be at least 1s", c.Duration)
	case c.Producers > 256:
		return fmt.Errorf("--producers %d: at most 256", c.Producers)
	}
	return nil
}

// run is one drill in progress.
type run struct {
	cfg   Config
	rng   *rand.Rand
	plan  *plan
	be    backend
	start time.Time // load start (t = 0)
	hist  *history

	mu     sync.Mutex
	events []Event
	exits  []string
	reg    *prometheus.Registry

	stopWatch    func()           // ends the node watcher (set by load)
	pclients     []*raidq.Client  // the producers' clients, until load takes them
	liveClient   *raidq.Client    // the live reader's, until startLive takes it
	topicCreated uint64           // the drill topic's creation time (unix ns)
	ensembles    [][]string       // the drill topic's ensembles (per partition, in shard order)
	lostKeys     []uint64         // set by verdict
	live         *liveReader      // reads during the faults
	liveInDoubts []inDoubt        // its in-doubt reports
	group        *liveGroup       // the live consumer group's member processes
	kafka        *kafkaDrill      // the kafka drill's gateways and kgo clients (instead of group)
	groupDels    []memberDelivery // what the group delivered (set by groupVerdict)
	rolling      *rollingResult   // the rolling scenario's findings
	corrupt      *corruptResult   // the corrupt scenario's findings
	clockStep    *clockStepResult // the clock-step scenario's findings
}

func (r *run) since() float64 {
	if r.start.IsZero() {
		return 0
	}
	return time.Since(r.start).Seconds()
}

// event records (and logs) something the drill did or saw.
func (r *run) event(kind, format string, args ...any) {
	e := Event{T: r.since(), Kind: kind, What: fmt.Sprintf(format, args...)}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.cfg.Logger.Info("drill: "+e.What, "t", fmt.Sprintf("%.2fs", e.T), "kind", kind)
}

// Run runs one drill. An error means the drill could not run (build,
// start, topic); a drill that ran and found a problem returns a Report
// with OK false.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	sc, _ := scenarioByName(cfg.Scenario)
	r := &run{cfg: cfg, rng: newRand(cfg.Seed), reg: prometheus.NewRegistry()}
	r.plan = newPlan(r, sc)
	rep = &Report{Scenario: cfg.Scenario, Seed: cfg.Seed, DurationS: cfg.Duration.Seconds(), Rate: cfg.Rate,
		Producers: r.plan.producers}

	dir, cleanup, err := drillDir(cfg)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	r.progress(Progress{Phase: "starting"})
	if r.plan.needNet && cfg.Docker == nil {
		if err := netCutPossible(); err != nil {
			return skipped(rep, "needs root and iptables: "+err.Error()), nil
		}
	}
	if r.plan.kafka && cfg.Docker != nil {
		return skipped(rep, "the kafka drill runs its gateways as local processes (not with --docker)"), nil
	}
	r.be, err = r.newBackend(dir)
	var skip *skipError
	if errors.As(err, &skip) {
		return skipped(rep, skip.reason), nil
	}
	if err != nil {
		return nil, err
	}
	defer r.be.Close()
	defer r.closeRunning() // an early return
	r.describe(rep)
	r.cfg.Logger.Info("drill: starting the nodes", "backend", r.be.Name(), "dir", dir)
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	watch, err := r.startRepairWatch()
	if err != nil {
		return nil, err
	}
	defer watch.close()
	if err := r.loadAndHeal(ctx, rep); err != nil {
		return nil, err
	}
	d, err := r.drainAll(ctx, rep)
	if err != nil {
		return nil, err
	}
	r.waitRepair(ctx, rep, watch)
	r.judge(rep, sc, d)
	if cfg.Out != "" {
		files, werr := r.writeOut(rep, d.dels)
		rep.Files = files
		if werr != nil {
			rep.Notes = append(rep.Notes, "writing --out: "+werr.Error())
		}
	}
	return rep, nil
}

// drillDir returns the drill's directory: cfg.Dir (created if need be)
// or a new temporary one. cleanup removes a temporary directory unless
// cfg.Keep; it does nothing otherwise.
func drillDir(cfg Config) (dir string, cleanup func(), err error) {
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return "", nil, err
		}
		return cfg.Dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", "raidq-drill-")
	if err != nil {
		return "", nil, err
	}
	if cfg.Keep {
		return d, func() {}, nil
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// newBackend returns the backend cfg.Docker asks for (Docker or local
// processes), not started; a *skipError says why this host cannot run it.
func (r *run) newBackend(dir string) (backend, error) {
	if r.cfg.Docker != nil {
		return newDockerBackend(r, dir)
	}
	return newProcBackend(r, dir)
}

// closeRunning closes whatever is still running on an early return: the
// clients, the live reader, the live group and the node watcher.
func (r *run) closeRunning() {
	r.closeClients()
	if r.live != nil {
		r.live.close()
	}
	if r.group != nil {
		r.group.close()
	}
	if r.kafka != nil {
		r.kafka.close()
	}
	if r.stopWatch != nil {
		r.stopWatch()
	}
}

// describe records the backend, the nodes, the faulted nodes and the
// plan's notes in rep.
func (r *run) describe(rep *Report) {
	rep.Backend = r.be.Name()
	rep.Nodes = r.be.IDs()
	for _, i := range r.plan.faulted {
		rep.Faulted = append(rep.Faulted, r.be.IDs()[i])
	}
	rep.Notes = append(rep.Notes, r.plan.notes...)
}

// setUp starts the cluster, connects the clients, creates the drill
// topic and starts the live consumer group (the kafka drill: its
// gateways, kgo producer and kgo group).
func (r *run) setUp(ctx context.Context) error {
	if err := r.be.Start(ctx); err != nil {
		return fmt.Errorf("start the cluster: %w", err)
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	if err := r.createTopic(ctx); err != nil {
		return err
	}
	var err error
	if r.plan.kafka {
		r.kafka, err = r.startKafka(ctx)
		return err
	}
	r.group, err = r.startGroup()
	return err
}

// loadAndHeal runs the load with the scenario's faults (recording the
// load average before and after it in rep), then heals every fault; a
// failed heal is an event, not an error.
func (r *run) loadAndHeal(ctx context.Context, rep *Report) error {
	if l, ok := loadAvg(); ok {
		rep.LoadAvg = append(rep.LoadAvg, l)
	}
	if err := r.load(ctx); err != nil {
		return err
	}
	if l, ok := loadAvg(); ok {
		rep.LoadAvg = append(rep.LoadAvg, l)
	}
	r.progress(Progress{Phase: "healing"})
	if err := r.heal(ctx); err != nil {
		r.event("error", "heal: %v", err)
	}
	return nil
}

// drained is what the readers delivered once the load was over.
type drained struct {
	dels        []delivery // the drain's read of every partition
	live        []delivery // the live reader's
	liveIDs     []inDoubt  // the live reader's in-doubt reports
	liveCorrupt int        // the live reader's corrupt records
	group       groupResult
	kafka       kafkaDrained // the kafka drill's kgo group and gateways
}

// drainAll reads every partition to its end (rep.DrainS is how long
// that took), then stops the live reader and the live group.
func (r *run) drainAll(ctx context.Context, rep *Report) (drained, error) {
	var d drained
	drainStart := time.Now()
	dels, err := r.drain(ctx)
	if err != nil {
		return d, err
	}
	d.dels = dels
	rep.DrainS = time.Since(drainStart).Seconds()
	// The live reader and the live group get 30s more (together) for
	// in-doubt stripes that repair re-appends (docs/design.md#read-path: delivered late
	// rather than lost).
	want, late := r.hist.ackedSet(), time.Now().Add(30*time.Second)
	d.live, d.liveIDs, d.liveCorrupt = r.live.stop(want, late)
	r.live = nil
	progress := func(got int) { r.progress(Progress{Phase: "group", Expected: len(want), Got: got}) }
	if r.kafka != nil {
		d.kafka = r.kafka.stop(want, late, progress)
		return d, nil
	}
	d.group = r.group.stop(want, late, progress)
	r.group = nil
	return d, nil
}

// waitRepair waits for repair to settle (rep.Repair), then stops the
// node watcher and every node.
func (r *run) waitRepair(ctx context.Context, rep *Report, watch *repairWatch) {
	r.progress(Progress{Phase: "repairing"})
	rr := watch.wait(ctx, r.hist.lastSend().Add(raidq.DefaultParams().ReadDelay+2*time.Second+r.cfg.RepairInterval),
		time.Now().Add(r.cfg.RepairWait), r.lastFaultOrHeal())
	watch.close()
	rep.Repair = &rr
	r.progress(Progress{Phase: "checking"})
	if r.stopWatch != nil {
		r.stopWatch()
	}
	r.be.StopAll()
}

// judge fills in rep's verdicts from what was delivered, the client
// metrics, the lost records, the shards left and the scenario's checks.
func (r *run) judge(rep *Report, sc scenario, d drained) {
	r.verdict(rep, d.dels)
	r.liveVerdict(rep, d.live, d.liveIDs, d.liveCorrupt)
	if r.kafka != nil {
		r.kafkaVerdict(rep, d.kafka, d.dels)
	} else {
		r.groupVerdict(rep, d.group)
	}
	r.clientMetrics(rep)
	if rep.Lost > 0 {
		rep.LostRecords = r.analyzeLost(rep)
	}
	red, where, err := r.redundancy()
	rep.ShardsAtEnd = red
	for _, w := range where {
		rep.Notes = append(rep.Notes, "below n at the end: "+w)
	}
	if err != nil {
		rep.Notes = append(rep.Notes, "counting shards: "+err.Error())
	}
	sc.check(r, rep)
	r.finish(rep)
	r.repairVerdict(rep)
}

// skipped marks rep as a drill that did not run here.
func skipped(rep *Report, reason string) *Report {
	rep.Skipped, rep.OK = reason, true
	rep.Notes = append(rep.Notes, "skipped: "+reason)
	return rep
}

func (r *run) progress(p Progress) {
	if r.cfg.Progress != nil {
		p.Duration = r.cfg.Duration
		r.cfg.Progress(p)
	}
}

// clientOpts are the options of every drill client: NATS errors go to
// the client logger (not straight to stderr).
func (r *run) clientOpts(name string) []raidq.Option {
	log := r.cfg.ClientLogger
	opts := []raidq.Option{raidq.WithCluster(r.be.Cluster()), raidq.WithLogger(log), raidq.WithTimeout(10 * time.Second),
		raidq.WithName(name), raidq.WithNATSOptions(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("NATS error", "client", name, "err", err)
		}))}
	if r.be.Name() == "docker" {
		// The servers advertise container addresses; stay on the published ports.
		opts = append(opts, raidq.WithNATSOptions(nats.IgnoreDiscoveredServers()))
	}
	return opts
}

// createTopic creates the drill topic through a client of the nodes that
// stay up.
func (r *run) createTopic(ctx context.Context) error {
	c, err := raidq.Connect(r.be.ClientURL(r.plan.stable()), r.clientOpts("raidq-drill-admin")...)
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		params, perr := raidq.ProfileParams(r.cfg.Latency)
		if perr != nil {
			return perr
		}
		info, err := c.CreateTopic(cctx, raidq.TopicConfig{Name: Topic, Partitions: r.cfg.Partitions, Params: params})
		if err == nil {
			r.topicCreated, r.ensembles = uint64(info.Created.UnixNano()), info.Ensembles
			break
		}
		last = err
		select {
		case <-cctx.Done():
			return fmt.Errorf("create the drill topic: %w", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return c.WaitTopic(cctx, Topic)
}

// heal undoes every fault still in place: resumes paused nodes, lifts
// partitions, starts nodes that are down, and waits until all are members.
func (r *run) heal(ctx context.Context) error {
	var errs []error
	if err := r.be.HealNet(); err != nil {
		errs = append(errs, err)
	}
	var started []int
	for i := range r.be.IDs() {
		switch {
		case r.be.Paused(i):
			r.event("heal", "SIGCONT %s (still paused at the end of the load)", r.be.IDs()[i])
			if err := r.be.Resume(i); err != nil {
				errs = append(errs, err)
			}
		case !r.be.Running(i):
			r.event("heal", "start %s (down at the end of the load)", r.be.IDs()[i])
			if err := r.be.StartNode(i); err != nil {
				errs = append(errs, err)
			}
			started = append(started, i)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	all := make([]int, len(r.be.IDs()))
	for i := range all {
		all[i] = i
	}
	if err := r.be.WaitUp(wctx, all...); err != nil {
		errs = append(errs, err)
	} else if len(started) > 0 {
		r.event("heal", "all nodes are members again")
	}
	return errors.Join(errs...)
}

// drain reads the topic back from before the load started until every
// acked record arrived and the readers are well past the end of the load,
// or cfg.Drain passes.
func (r *run) drain(ctx context.Context) ([]delivery, error) {
	c, err := raidq.Connect(r.be.ClientURL(nil), append(r.clientOpts("raidq-drill-consumer"), raidq.WithMetrics(r.reg))...)
	if err != nil {
		return nil, fmt.Errorf("drain: %w", err)
	}
	defer c.Close()
	if err := c.WaitTopic(ctx, Topic); err != nil {
		return nil, fmt.Errorf("drain: %w", err)
	}
	h := r.hist
	cons, err := c.Consumer(Topic, raidq.WithStart(r.start.Add(-5*time.Second)), raidq.WithBuffer(4096), raidq.WithReports(h.onReport))
	if err != nil {
		return nil, fmt.Errorf("drain: %w", err)
	}
	defer cons.Close()
	want := h.ackedSet()
	// Past the last send by the read delay and the look-ahead, so late
	// copies (retries, rewrites, re-appends) show up too.
	settle := h.lastSend().Add(raidq.DefaultParams().ReadDelay + 4*time.Second)
	hard := time.Now().Add(r.cfg.Drain)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var dels []delivery
	got := make(map[uint64]bool)
	for {
		select {
		case m, ok := <-cons.Messages():
			if !ok {
				return dels, errors.New("drain: the consumer closed its channel")
			}
			d := h.parseDelivery(m, r.start)
			dels = append(dels, d)
			if d.known {
				k := key(d.prod, d.seq)
				if want[k] && !got[k] {
					got[k] = true
				}
			}
			continue
		case <-tick.C:
		case <-ctx.Done():
			return dels, ctx.Err()
		}
		r.progress(Progress{Phase: "draining", Expected: len(want), Got: len(got)})
		now := time.Now()
		if (len(got) == len(want) && now.After(settle)) || now.After(hard) {
			if now.After(hard) && len(got) < len(want) {
				r.event("info", "drain stopped after %s with %d of %d acked records delivered", r.cfg.Drain, len(got), len(want))
			}
			return dels, nil
		}
	}
}

// clientMetrics adds up the producers' conflict, retry and rewrite counters.
func (r *run) clientMetrics(rep *Report) {
	if v, _, err := metrics.Sum(r.reg, "raidq_producer_conflicts_total", nil); err == nil {
		rep.Conflicts = int(v)
	}
	if v, _, err := metrics.Sum(r.reg, "raidq_producer_stripe_retries_total", nil); err == nil {
		rep.Retries = int(v)
	}
	if v, _, err := metrics.Sum(r.reg, "raidq_producer_rewrites_total", nil); err == nil {
		rep.Rewrites = int(v)
	}
}

// finish sorts events, sets the checks and the verdict.
func (r *run) finish(rep *Report) {
	r.mu.Lock()
	rep.Events = append([]Event(nil), r.events...)
	rep.NodeExits = append([]string(nil), r.exits...)
	r.mu.Unlock()
	sort.SliceStable(rep.Events, func(i, j int) bool { return rep.Events[i].T < rep.Events[j].T })
	rep.Phases = phases(r.sends(), rep.Events, r.cfg.Duration)
	base := []Check{
		{Name: "nothing acked lost", OK: rep.Lost == 0, Detail: fmt.Sprintf("%d lost", rep.Lost)},
		{Name: "nothing unexpected delivered", OK: rep.Unexpected == 0, Detail: fmt.Sprintf("%d unexpected", rep.Unexpected)},
		{Name: "no node died by itself", OK: len(rep.NodeExits) == 0, Detail: strings.Join(rep.NodeExits, "; ")},
	}
	for _, e := range rep.Events {
		if e.Kind == "error" {
			base = append(base, Check{Name: "every fault and heal ran", OK: false, Detail: e.What})
			break
		}
	}
	rep.Checks = append(base, rep.Checks...)
	rep.OK = true
	for _, c := range rep.Checks {
		rep.OK = rep.OK && c.OK
	}
}

// outBase is the path prefix of the --out files.
func (r *run) outBase() string {
	return filepath.Join(r.cfg.Out, fmt.Sprintf("%s-seed%d", r.cfg.Scenario, r.cfg.Seed))
}

// loadAvg is the 1-minute load average (Linux only).
func loadAvg() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return 0, false
	}
	return l, true
}
