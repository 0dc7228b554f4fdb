package drill

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// step is one scheduled action, at a time since the load started.
type step struct {
	at   time.Duration
	name string
	do   func(ctx context.Context) error
}

// plan is what a scenario sets up: which nodes get faults (clients
// connect to the others), slow nodes, producer clocks and the schedule.
type plan struct {
	r          *run
	producers  int
	faulted    []int
	slow       map[int]time.Duration
	clockFault map[int]bool // nodes started with --clock-fault (clockstep.go)
	isolate    []int
	clocks     map[int]func() int64
	steps      []step
	notes      []string
	onExit     func(ctx context.Context, x exitInfo) bool
	kafka      bool     // Kafka clients through gateways instead of native producers and group (kafka.go)
	marks      sync.Map // name -> time.Duration since the load start

	// needNet: the scenario cannot run without iptables isolation (Run
	// reports it skipped instead of freezing the nodes).
	needNet bool
}

// scenario is one named drill.
type scenario struct {
	name  string
	about string
	setup func(p *plan)
	check func(r *run, rep *Report)
	// duration is the load's length when Config.Duration is not set
	// (0: 30s).
	duration time.Duration
}

var scenarioList = []scenario{
	{name: "none", about: "no faults: the baseline for latency and throughput", setup: func(*plan) {}},
	{name: "kill-2", about: "SIGKILL two nodes at 30% of the load, restart them at 65%", setup: setupKill(2, 0.65)},
	{name: "kill-3", about: "SIGKILL three nodes at 30% (sends fail with a clear error), restart them at 60%",
		setup: setupKill(3, 0.60), check: checkKill3},
	{name: "slow-2", about: "two nodes answer 100 ms late all along; one of them is also paused (SIGSTOP) for 10 s",
		setup: setupSlow2},
	{name: "pause", about: "SIGSTOP one node for 10 s at 30%, then SIGCONT", setup: setupPause},
	{name: "hang", about: "SIGSTOP one node for 30 s from 10% of a 45 s load, then SIGCONT (the load goes on after it)",
		setup: setupHang, duration: 45 * time.Second},
	{name: "rolling", about: "restart every node in turn under load (SIGTERM, start, wait until it is a member)",
		setup: setupRolling, check: checkRolling},
	{name: "skew", about: "producer clocks off by ±200 ms, one by 2 s", setup: setupSkew},
	{name: "clock-step", about: "step one node's clock +5 s at 30% of the load, -5 s (behind real time) at 50%, back at 70% (--clock-fault)",
		setup: setupClockStep, check: checkClockStep},
	{name: "conflict", about: "16+ producers whose clocks tick in whole milliseconds, so their offsets collide",
		setup: setupConflict, check: checkConflict},
	{name: "partition", about: "cut two nodes off the network for 10 s (iptables as root; else SIGSTOP)",
		setup: setupPartition},
	{name: "isolate", about: "cut one node's client and route ports off for 10 s at 30% (iptables as root; else skipped)",
		setup: setupIsolate},
	{name: "corrupt", about: "stop a node, flip bytes in its LevelDB files, restart it: it refuses clearly (then it is wiped) or serves",
		setup: setupCorrupt, check: checkCorrupt},
	{name: "wipe", about: "SIGKILL a node, erase its data directory, bring it back as a new incarnation", setup: setupWipe},
	{name: "kafka", about: "kill-2 under Kafka clients: a kgo producer and a kgo group of 2 through 2 `raidq kafka` gateways",
		setup: setupKafka},
}

// Names lists the scenarios.
func Names() []string {
	var ns []string
	for _, s := range scenarioList {
		ns = append(ns, s.name)
	}
	return ns
}

// About describes a scenario.
func About(name string) string {
	s, _ := scenarioByName(name)
	return s.about
}

func scenarioByName(name string) (scenario, bool) {
	for _, s := range scenarioList {
		if s.name == name {
			if s.check == nil {
				s.check = func(*run, *Report) {}
			}
			return s, true
		}
	}
	return scenario{}, false
}

func newPlan(r *run, sc scenario) *plan {
	p := &plan{r: r, producers: r.cfg.Producers, slow: make(map[int]time.Duration), clocks: make(map[int]func() int64),
		clockFault: make(map[int]bool)}
	sc.setup(p)
	sort.Slice(p.steps, func(i, j int) bool { return p.steps[i].at < p.steps[j].at })
	return p
}

const nodes = 6

// pick chooses n distinct nodes (by the seed) that have no fault yet and
// marks them faulted.
func (p *plan) pick(n int) []int {
	var free []int
	for i := range nodes {
		if !p.isFaulted(i) {
			free = append(free, i)
		}
	}
	p.r.rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	got := append([]int(nil), free[:n]...)
	sort.Ints(got)
	p.faulted = append(p.faulted, got...)
	return got
}

func (p *plan) isFaulted(i int) bool {
	for _, f := range p.faulted {
		if f == i {
			return true
		}
	}
	return false
}

// stable lists the nodes without faults (the clients connect to them);
// nil (all nodes) when every node gets one.
func (p *plan) stable() []int {
	var s []int
	for i := range nodes {
		if !p.isFaulted(i) {
			s = append(s, i)
		}
	}
	return s
}

func (p *plan) clock(i int) func() int64 { return p.clocks[i] }

// frac is a fraction of the load's duration.
func (p *plan) frac(f float64) time.Duration {
	return time.Duration(f * float64(p.r.cfg.Duration))
}

// upTo is d, or f of the load's duration when that is shorter (short
// drills scale their pauses down).
func (p *plan) upTo(d time.Duration, f float64) time.Duration {
	return min(d, p.frac(f))
}

func (p *plan) add(at time.Duration, name string, do func(ctx context.Context) error) {
	p.steps = append(p.steps, step{at: at, name: name, do: do})
}

func (p *plan) mark(name string) { p.marks.Store(name, time.Since(p.r.start)) }

func (p *plan) markAt(name string) (time.Duration, bool) {
	v, ok := p.marks.Load(name)
	if !ok {
		return 0, false
	}
	return v.(time.Duration), true
}

// ids names nodes.
func (r *run) ids(ns []int) string {
	var s []string
	for _, i := range ns {
		s = append(s, r.be.IDs()[i])
	}
	return strings.Join(s, " ")
}

// kill SIGKILLs nodes at once.
func (r *run) kill(ns []int) error {
	var wg sync.WaitGroup
	for _, i := range ns {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.be.Kill(i) }()
	}
	wg.Wait()
	r.event("fault", "SIGKILL %s", r.ids(ns))
	return nil
}

// restart starts nodes and waits until they are members again.
func (r *run) restart(ctx context.Context, ns []int, what string) error {
	t0 := time.Now()
	for _, i := range ns {
		if err := r.be.StartNode(i); err != nil {
			return err
		}
	}
	r.event("heal", "start %s%s", r.ids(ns), what)
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := r.be.WaitUp(wctx, ns...); err != nil {
		return err
	}
	r.event("info", "%s member again after %.1fs", r.ids(ns), time.Since(t0).Seconds())
	return nil
}

func (r *run) pauseFor(ctx context.Context, i int, d time.Duration) error {
	if err := r.be.Pause(i); err != nil {
		return err
	}
	r.event("fault", "SIGSTOP %s for %s", r.ids([]int{i}), d.Round(100*time.Millisecond))
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	if err := r.be.Resume(i); err != nil {
		return err
	}
	r.event("heal", "SIGCONT %s", r.ids([]int{i}))
	return nil
}

func setupKill(n int, back float64) func(p *plan) {
	return func(p *plan) {
		ns := p.pick(n)
		p.add(p.frac(0.3), "kill", func(context.Context) error { p.mark("kill"); return p.r.kill(ns) })
		p.add(p.frac(back), "restart", func(ctx context.Context) error {
			p.mark("restart")
			return p.r.restart(ctx, ns, "")
		})
	}
}

func checkKill3(r *run, rep *Report) {
	nee := rep.Errors["not_enough_nodes"]
	rep.Checks = append(rep.Checks, Check{Name: "sends fail with a clear error while three nodes are down",
		OK:     nee > 0 && strings.Contains(r.hist.errFirst["not_enough_nodes"], "not enough nodes"),
		Detail: fmt.Sprintf("%d not-enough-nodes failures; first: %s", nee, short(r.hist.errFirst["not_enough_nodes"], 300))})
	if at, ok := r.plan.markAt("restart"); ok {
		after := 0
		for _, p := range r.hist.prods {
			for i := range p.recs {
				if p.recs[i].status == statusAcked && time.Duration(p.recs[i].sent) > at {
					after++
				}
			}
		}
		rep.Checks = append(rep.Checks, Check{Name: "sends succeed again after the restart", OK: after > 0,
			Detail: fmt.Sprintf("%d acked sends attempted after the restart", after)})
	}
}

func setupSlow2(p *plan) {
	ns := p.pick(2)
	for _, i := range ns {
		p.slow[i] = 100 * time.Millisecond
	}
	p.notes = append(p.notes, "slow nodes answer 100ms late from the start (--reply-delay)")
	d := p.upTo(10*time.Second, 0.35)
	p.add(p.frac(0.3), "pause", func(ctx context.Context) error { return p.r.pauseFor(ctx, ns[0], d) })
}

func setupPause(p *plan) {
	ns := p.pick(1)
	d := p.upTo(10*time.Second, 0.4)
	p.add(p.frac(0.3), "pause", func(ctx context.Context) error { return p.r.pauseFor(ctx, ns[0], d) })
}

// setupHang stops one node for 30 s (3x pause's 10 s: past the clients'
// request timeouts and the group heartbeat TTL) from 10% of the load; with
// the default 45 s load the load goes on for 10 s after SIGCONT. Shorter
// loads scale the stop to 75% of the load.
func setupHang(p *plan) {
	ns := p.pick(1)
	d := p.upTo(30*time.Second, 0.75)
	p.add(p.frac(0.1), "hang", func(ctx context.Context) error { return p.r.pauseFor(ctx, ns[0], d) })
}

// rollingExits records the exit codes of the graceful stops.
type rollingResult struct {
	mu    sync.Mutex
	codes []string
	bad   []string
}

func setupRolling(p *plan) {
	all := p.pick(nodes)
	first := p.r.rng.IntN(nodes)
	res := &rollingResult{}
	p.r.rolling = res
	p.add(p.frac(0.1), "rolling restart", func(ctx context.Context) error {
		for k := range all {
			i := all[(first+k)%len(all)]
			t0 := time.Now()
			code, err := p.r.be.Stop(i)
			id := p.r.be.IDs()[i]
			p.r.event("fault", "SIGTERM %s (exit code %d after %.1fs)", id, code, time.Since(t0).Seconds())
			res.mu.Lock()
			res.codes = append(res.codes, fmt.Sprintf("%s:%d", id, code))
			if err != nil || code != 0 {
				res.bad = append(res.bad, fmt.Sprintf("%s exit %d %v", id, code, err))
			}
			res.mu.Unlock()
			if err := p.r.restart(ctx, []int{i}, ""); err != nil {
				return err
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
}

func checkRolling(r *run, rep *Report) {
	res := r.rolling
	res.mu.Lock()
	defer res.mu.Unlock()
	rep.Checks = append(rep.Checks, Check{Name: "every node stops gracefully on SIGTERM (exit 0)",
		OK: len(res.bad) == 0 && len(res.codes) == nodes, Detail: strings.Join(append(res.codes, res.bad...), " ")})
}

func setupSkew(p *plan) {
	big := 2 * time.Second
	if p.r.rng.IntN(2) == 0 {
		big = -big
	}
	var desc []string
	for i := range p.producers {
		off := 200 * time.Millisecond
		switch {
		case i == 0:
			off = big
		case i%2 == 0:
			off = -off
		}
		o := int64(off)
		p.clocks[i] = func() int64 { return time.Now().UnixNano() + o }
		desc = append(desc, fmt.Sprintf("p%d %+v", i, off))
	}
	p.notes = append(p.notes, "producer clocks: "+strings.Join(desc, ", "))
}

func setupConflict(p *plan) {
	p.producers = max(16, p.producers)
	for i := range p.producers {
		p.clocks[i] = func() int64 { return time.Now().UnixNano() / 1e6 * 1e6 }
	}
	p.notes = append(p.notes, fmt.Sprintf("%d producers, clocks quantized to 1ms", p.producers))
}

func checkConflict(_ *run, rep *Report) {
	rep.Checks = append(rep.Checks, Check{Name: "producers collided (nodes answered CONFLICT)", OK: rep.Conflicts > 0,
		Detail: fmt.Sprintf("%d conflicts, %d retries, %d rewrites", rep.Conflicts, rep.Retries, rep.Rewrites)})
}

func setupPartition(p *plan) {
	ns := p.pick(2)
	p.isolate = ns
	p.addCut(ns, p.upTo(10*time.Second, 0.4))
}

// setupIsolate cuts one node's client and route ports (everything its uid
// owns and everything reaching its ports) off for 10 s at 30%: the
// producers (on the other nodes) must not notice; the live group members,
// whose lists include it, lose whatever they had through it. Without
// iptables the drill is skipped (Report.Skipped), never faked with
// SIGSTOP; setupNetCut removes the chains of an earlier drill that died.
func setupIsolate(p *plan) {
	ns := p.pick(1)
	p.isolate, p.needNet = ns, true
	p.addCut(ns, p.upTo(10*time.Second, 0.4))
}

// addCut isolates ns at 30% of the load for d, then reconnects them
// (resuming nodes frozen instead where isolation falls back to SIGSTOP).
func (p *plan) addCut(ns []int, d time.Duration) {
	p.add(p.frac(0.3), "partition", func(context.Context) error {
		if err := p.r.be.Isolate(ns); err != nil {
			return err
		}
		p.r.event("fault", "cut %s off the network for %s (%s)", p.r.ids(ns), d.Round(100*time.Millisecond), p.r.be.Isolation())
		return nil
	})
	p.add(p.frac(0.3)+d, "heal partition", func(context.Context) error {
		if err := p.r.be.HealNet(); err != nil {
			return err
		}
		for _, i := range ns {
			if p.r.be.Paused(i) {
				if err := p.r.be.Resume(i); err != nil {
					return err
				}
			}
		}
		p.r.event("heal", "reconnect %s", p.r.ids(ns))
		return nil
	})
}

// corruptResult is what the corrupted node did.
type corruptResult struct {
	mu       sync.Mutex
	outcome  string // refused, served
	refusal  string
	runtime  string   // a store failure found while serving
	drops    []string // LevelDB's LOG: what it dropped when it reopened
	restarts int
}

// setupCorrupt flips bytes in one node's stopped slot store at 30% of
// the load and restarts it; a node that refuses the store, or fails on
// it while serving, is wiped and restarted.
func setupCorrupt(p *plan) {
	i := p.pick(1)[0]
	res := &corruptResult{}
	p.r.corrupt = res
	r := p.r
	p.add(p.frac(0.3), "corrupt", func(ctx context.Context) error {
		return r.corruptNode(ctx, i, res)
	})
	// A corruption found while serving stops the node (exit 1, "store
	// failed"): the operator's answer is a wipe and a restart.
	p.onExit = func(ctx context.Context, x exitInfo) bool {
		return r.wipeCorrupted(ctx, i, res, x)
	}
}

// corruptNode stops node i, flips bytes in its slot store and restarts
// it, recording in res whether it refused the store (then it is wiped
// and restarted) or served on it.
func (r *run) corruptNode(ctx context.Context, i int, res *corruptResult) error {
	if err := r.flipNode(i); err != nil {
		return err
	}
	logPath := filepath.Join(r.be.DataDir(i), "slots", "LOG")
	var logFrom int64
	if st, err := os.Stat(logPath); err == nil {
		logFrom = st.Size()
	}
	if err := r.be.StartNode(i); err != nil {
		return err
	}
	r.be.ExpectExit(i, true)
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	exited, err := r.be.WaitUpOrExit(wctx, i)
	switch {
	case exited:
		return r.corruptRefused(ctx, i, res, err)
	case err != nil:
		return err
	}
	r.be.ExpectExit(i, false)
	r.corruptServed(i, res, logPath, logFrom)
	return nil
}

// flipNode stops node i (SIGTERM) and flips bytes in its LevelDB slot
// store.
func (r *run) flipNode(i int) error {
	id := r.be.IDs()[i]
	code, err := r.be.Stop(i)
	r.event("fault", "SIGTERM %s (exit code %d)", id, code)
	if err != nil {
		return err
	}
	seed := r.rng.Uint64()
	flipped, err := flipBytes(filepath.Join(r.be.DataDir(i), "slots"), seed, 4)
	if err != nil {
		return err
	}
	r.event("fault", "flip bytes in %s's LevelDB: %s", id, strings.Join(flipped, ", "))
	return nil
}

// corruptRefused records that node i refused its corrupted store (the
// exit error refusal), then wipes the store and restarts the node.
func (r *run) corruptRefused(ctx context.Context, i int, res *corruptResult, refusal error) error {
	res.mu.Lock()
	res.outcome, res.refusal = "refused", refusal.Error()
	res.mu.Unlock()
	r.event("info", "%s refused to start: %s", r.be.IDs()[i], short(refusal.Error(), 300))
	if err := wipeDir(filepath.Join(r.be.DataDir(i), "slots")); err != nil {
		return err
	}
	return r.restart(ctx, []int{i}, " on a wiped slot store (a new incarnation)")
}

// corruptServed records that node i serves on its corrupted store, with
// what LevelDB's LOG (from logFrom on) says it dropped.
func (r *run) corruptServed(i int, res *corruptResult, logPath string, logFrom int64) {
	id := r.be.IDs()[i]
	drops := leveldbDrops(logPath, logFrom)
	res.mu.Lock()
	res.outcome, res.drops = "served", drops
	res.mu.Unlock()
	if len(drops) > 0 {
		r.event("info", "%s serves on its corrupted store; LevelDB dropped what it could not read: %s", id,
			short(strings.Join(drops, "; "), 300))
	} else {
		r.event("info", "%s serves on its corrupted store", id)
	}
}

// wipeCorrupted handles node i's exit x: a store failure found while
// serving (at most twice) wipes and restarts the node in the background
// and returns true; any other exit returns false.
func (r *run) wipeCorrupted(ctx context.Context, i int, res *corruptResult, x exitInfo) bool {
	if x.node != i || !mentionsCorruption(x.tail) {
		return false
	}
	res.mu.Lock()
	res.runtime = lastLine(x.tail)
	res.restarts++
	again := res.restarts <= 2
	res.mu.Unlock()
	if !again {
		return false
	}
	r.event("info", "%s stopped: its store failed while serving: %s; wiping and restarting it", r.be.IDs()[i], short(lastLine(x.tail), 200))
	go func() {
		if err := wipeDir(filepath.Join(r.be.DataDir(i), "slots")); err != nil {
			r.event("error", "wipe %s: %v", r.be.IDs()[i], err)
			return
		}
		if err := r.restart(ctx, []int{i}, " on a wiped slot store (a new incarnation)"); err != nil {
			r.event("error", "restart %s: %v", r.be.IDs()[i], err)
		}
	}()
	return true
}

// leveldbDrops returns the lines of a LevelDB LOG file, from byte from on,
// where LevelDB says it dropped data ("journal@drop", "table@drop", ...).
func leveldbDrops(path string, from int64) []string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < from {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b[from:]), "\n") {
		if strings.Contains(l, "@drop") {
			if f := strings.Fields(l); len(f) > 1 {
				l = strings.Join(f[1:], " ") // without the time
			}
			out = append(out, l)
		}
	}
	return out
}

func mentionsCorruption(s string) bool {
	s = strings.ToLower(s)
	return strings.Contains(s, "corrupt") || strings.Contains(s, "damaged")
}

func checkCorrupt(r *run, rep *Report) {
	res := r.corrupt
	res.mu.Lock()
	defer res.mu.Unlock()
	switch res.outcome {
	case "refused":
		rep.Checks = append(rep.Checks, Check{Name: "the corrupted node refuses to start with a clear error",
			OK: mentionsCorruption(res.refusal), Detail: short(res.refusal, 300)})
	case "served":
		d := "served its corrupted store"
		if res.runtime != "" {
			d += "; then stopped: " + res.runtime
		}
		rep.Checks = append(rep.Checks, Check{Name: "the corrupted node serves (or stops clearly)", OK: true, Detail: d})
		// Serving is fine only if nothing was silently dropped: a dropped
		// journal chunk held slots the node had acknowledged, and it now
		// answers "empty" for them (it mistakes lost for never had).
		rep.Checks = append(rep.Checks, Check{Name: "a serving node did not silently drop acknowledged slots",
			OK: len(res.drops) == 0, Detail: short(strings.Join(res.drops, "; "), 400)})
	default:
		rep.Checks = append(rep.Checks, Check{Name: "the corrupted node refuses clearly or serves", OK: false,
			Detail: "the corruption step did not finish"})
	}
}

// flipBytes XORs n random bytes of every LevelDB table (.ldb) and journal
// (.log) file in dir and says what it changed.
func flipBytes(dir string, seed uint64, n int) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0xf11b))
	var out []string
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".ldb") && !strings.HasSuffix(name, ".log") {
			continue
		}
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return out, err
		}
		if len(b) == 0 {
			continue
		}
		for range n {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("%s (%d B)", name, len(b)))
	}
	if len(out) == 0 {
		return nil, errors.New("no .ldb or .log file to corrupt in " + dir)
	}
	return out, nil
}

func setupWipe(p *plan) {
	ns := p.pick(1)
	r := p.r
	p.add(p.frac(0.3), "wipe", func(context.Context) error {
		if err := r.kill(ns); err != nil {
			return err
		}
		if err := wipeDir(r.be.DataDir(ns[0])); err != nil {
			return err
		}
		r.event("fault", "erase %s's data directory", r.ids(ns))
		return nil
	})
	p.add(p.frac(0.5), "restart", func(ctx context.Context) error {
		return r.restart(ctx, ns, " on an empty data directory (a new incarnation)")
	})
}

func short(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed_d811)) }
