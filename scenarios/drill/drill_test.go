package drill

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
)

func TestValueRoundTrip(t *testing.T) {
	pad := make([]byte, 300)
	for _, c := range []struct{ prod, seq int }{{0, 0}, {3, 17}, {255, 1 << 30}} {
		v := value(c.prod, c.seq, time.Unix(1, 2), 256, pad)
		if len(v) != 256 {
			t.Fatalf("len %d", len(v))
		}
		p, s, ok := parseID(v)
		if !ok || p != c.prod || s != c.seq {
			t.Fatalf("%q: got %d %d %v", v[:20], p, s, ok)
		}
	}
	for _, bad := range []string{"", "p", "x1-2|", "p1-2", "p-2|", "p1-|", "p1x2|", "p1234567890123-1|"} {
		if _, _, ok := parseID([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestCheckHistory(t *testing.T) {
	acked := func(part int) sendRec { return sendRec{status: statusAcked, part: int32(part)} }
	prods := [][]sendRec{
		// p0: 0,1,2 acked; 3 failed; 4 unknown
		{acked(0), acked(0), acked(1), {status: statusFailed}, {status: statusUnknown}},
		// p1: 0 acked (lost), 1 acked
		{acked(0), acked(0)},
	}
	d := func(prod, seq, part int) delivery { return delivery{known: true, prod: prod, seq: seq, part: part} }
	dels := []delivery{
		d(0, 1, 0), d(0, 0, 0), // reordered in partition 0
		d(0, 2, 1), d(0, 2, 1), // a duplicate
		d(0, 4, 2),         // unknown, delivered: recovered
		d(1, 1, 0),         // p1-0 never delivered: lost
		d(1, 9, 0),         // never attempted: unexpected
		{raw: `"garbage"`}, // not a drill value: unexpected
		{raw: `"garbage"`}, // counted once
	}
	c := checkHistory(prods, dels)
	want := checked{attempted: 7, acked: 5, failed: 1, unknown: 1, delivered: 5, lost: 1, unexpected: 2, duplicates: 1,
		recovered: 1, reordered: 1}
	got := c
	got.lost_, got.unexpectedSamples = nil, nil
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if len(c.lost_) != 1 || c.lost_[0] != key(1, 0) {
		t.Fatalf("lost keys %v", c.lost_)
	}
}

func TestScenarioPlans(t *testing.T) {
	for _, name := range Names() {
		sc, _ := scenarioByName(name)
		r := &run{cfg: Config{Scenario: name, Seed: 3, Duration: 10 * time.Second, Producers: 4}}
		r.rng = newRand(3)
		p := newPlan(r, sc)
		if len(p.faulted) > nodes || (len(p.stable()) == 0 && len(p.faulted) < nodes) {
			t.Errorf("%s: faulted %v stable %v", name, p.faulted, p.stable())
		}
		for _, s := range p.steps {
			if s.at < 0 || s.at > r.cfg.Duration {
				t.Errorf("%s: step %s at %s", name, s.name, s.at)
			}
		}
		if About(name) == "" {
			t.Errorf("%s: no description", name)
		}
	}
	if DefaultDuration("hang") != 45*time.Second || DefaultDuration("kill-2") != 30*time.Second {
		t.Errorf("default durations: hang %s, kill-2 %s", DefaultDuration("hang"), DefaultDuration("kill-2"))
	}
	// With its default load, hang's stop ends while the load goes on.
	r := &run{cfg: Config{Scenario: "hang", Seed: 1}, rng: newRand(1)}
	if err := r.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	sc, _ := scenarioByName("hang")
	if p := newPlan(r, sc); len(p.steps) != 1 || p.steps[0].at+p.upTo(30*time.Second, 0.75) > r.cfg.Duration-5*time.Second ||
		p.upTo(30*time.Second, 0.75) != 30*time.Second {
		t.Errorf("hang: steps %+v in a %s load", p.steps, r.cfg.Duration)
	}
	// clock-step: one node with --clock-fault (no client connects to it), stepped at 30%, 50%, 70%.
	cr := &run{cfg: Config{Duration: 10 * time.Second}, rng: newRand(1)}
	if sc, _ := scenarioByName("clock-step"); sc.check == nil {
		t.Error("clock-step has no check")
	} else if p := newPlan(cr, sc); len(p.clockFault) != 1 || len(p.faulted) != 1 || !p.clockFault[p.faulted[0]] || len(p.steps) != 3 ||
		p.steps[0].at != 3*time.Second || p.steps[1].at != 5*time.Second || p.steps[2].at != 7*time.Second {
		t.Errorf("clock-step: clock faults %v, faulted %v, steps %+v", p.clockFault, p.faulted, p.steps)
	}
	if sc, _ := scenarioByName("isolate"); !newPlan(&run{cfg: Config{Duration: 10 * time.Second}, rng: newRand(1)}, sc).needNet {
		t.Error("isolate does not require iptables")
	}
	if err := (&Config{Scenario: "nope"}).defaults(); err == nil || !strings.Contains(err.Error(), "kill-2") {
		t.Fatalf("unknown scenario: %v", err)
	}
}

// TestDrills runs two short drills against six `raidq node` processes:
// kill-2 (two nodes SIGKILLed mid-load, restarted later) and slow-2 (two
// nodes 100ms late, one of them paused). About 15-25s each.
func TestDrills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes: skipped with -short")
	}
	bin := cluster.BuildBinary(t)
	for _, name := range []string{"kill-2", "slow-2"} {
		t.Run(name, func(t *testing.T) { runShortDrill(t, bin, name, 6*time.Second, nil) })
	}
}

// TestClockStepDrill runs clock-step on a 15 s load: one node started
// with --clock-fault is stepped 5 s ahead, 5 s behind and back, and its
// status must show "clock off" ahead, then behind, then nothing, with
// nothing acked lost and the live group missing nothing. About 25-35s.
func TestClockStepDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes: skipped with -short")
	}
	// Every check, full redundancy included: a repair pass on the stepped
	// node's clock marked the real future verified until repair took the
	// peers' clocks as its horizon (core.BeyondHorizon).
	r := runShortDrill(t, cluster.BuildBinary(t), "clock-step", 15*time.Second, nil)
	var shown int
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, "raidq status shows") {
			shown++
		}
	}
	if shown != len(clockSteps) {
		t.Fatalf("%d status checks, want one per clock step (%d): %+v", shown, len(clockSteps), r.Checks)
	}
}

// runShortDrill runs drill name on a short load at 500 msgs/s: every
// check must pass (those known fails are only logged), nothing acked may
// be lost or unexpected, and the live group must have run.
func runShortDrill(t *testing.T, bin, name string, d time.Duration, known func(Check) bool) *Report {
	t.Helper()
	start := time.Now()
	r, err := Run(context.Background(), Config{Scenario: name, Seed: 1, Duration: d, Rate: 500,
		Binary: bin, Dir: t.TempDir(), Drain: 30 * time.Second, Logger: testkit.Logger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s in %s: attempted %d acked %d failed %d unknown %d delivered %d lost %d in_doubt %d p99 %.1fms gap %.0fms",
		name, time.Since(start).Round(time.Millisecond), r.Attempted, r.Acked, r.FailedSends, r.Unknown, r.Delivered,
		r.Lost, r.InDoubt, r.AckP99Ms, r.LongestAckGapMs)
	ok := true
	for _, c := range r.Checks {
		switch {
		case !c.OK && known != nil && known(c):
			t.Logf("known failure: %s: %s", c.Name, c.Detail)
		case !c.OK:
			ok = false
			t.Errorf("check failed: %s: %s", c.Name, c.Detail)
		}
	}
	if g := r.Group; g != nil {
		t.Logf("%s: live group delivered %d, missing %d, duplicates %d, exits %d", name, g.Delivered, g.Missing,
			g.Duplicates, g.Exits)
	}
	if !ok || r.Group == nil || r.Lost != 0 || r.Unexpected != 0 || r.Acked == 0 {
		t.Fatalf("%s: %+v", name, *r)
	}
	// Failed and unknown sends are only logged: two dead or slow
	// nodes leave W=4 reachable, but on an overloaded machine a
	// starved process makes stripes miss their attempts, with or
	// without faults (docs/drills.md, "What does not hold yet").
	if r.FailedSends+r.Unknown > 0 {
		t.Logf("%s: %d failed and %d unknown sends of %d: %v", name, r.FailedSends, r.Unknown, r.Attempted, r.ErrorSamples)
	}
	return r
}

func TestPhases(t *testing.T) {
	ms := int64(time.Millisecond)
	var recs []sendRec
	for i := range 100 { // one send every 100ms for 10s; 5ms acks, 50ms during the faults
		sent := int64(i) * 100 * ms
		lat := 5 * ms
		if sent >= 3000*ms && sent < 6000*ms {
			lat = 50 * ms
		}
		recs = append(recs, sendRec{sent: sent, done: sent + lat, status: statusAcked})
	}
	events := []Event{{T: 3, Kind: "fault"}, {T: 6, Kind: "heal"}, {T: 7, Kind: "info"}}
	ps := phases([][]sendRec{recs}, events, 10*time.Second)
	if len(ps) != 3 || ps[0].Name != "before" || ps[1].Name != "faults" || ps[2].Name != "after" {
		t.Fatalf("%+v", ps)
	}
	if ps[0].Acked != 30 || ps[1].Acked != 30 || ps[2].Acked != 40 || ps[1].AckP99Ms < 49 || ps[0].AckP99Ms > 6 {
		t.Fatalf("%+v", ps)
	}
	if got := phases([][]sendRec{recs}, nil, 10*time.Second); got != nil {
		t.Fatalf("no faults: %+v", got)
	}
}

// TestWhereShort: the stripes below n at the end are summed up per
// partition and missing node, with their offsets in load time.
func TestWhereShort(t *testing.T) {
	start := time.Unix(1000, 0)
	r := &run{start: start, ensembles: [][]string{{"n0", "n1", "n2", "n3", "n4", "n5"}, {"n5", "n4", "n3", "n2", "n1", "n0"}}}
	off := func(s float64) uint64 { return uint64(start.UnixNano() + int64(s*1e9)) }
	all := func(but ...int) map[int]bool {
		m := map[int]bool{}
		for i := range 6 {
			m[i] = true
		}
		for _, b := range but {
			delete(m, b)
		}
		return m
	}
	want := map[slotKey]string{{1, off(8.2)}: "a", {1, off(9.7)}: "b", {0, off(3)}: "c", {0, off(4)}: "d"}
	count := map[copyKey]map[int]bool{
		{1, "a", off(8.2)}: all(4), {1, "b", off(9.7)}: all(4), // partition 1, position 4: n1
		{0, "c", off(3)}: all(),                                 // whole
		{0, "d", off(4)}: all(0, 5), {0, "d", off(4.5)}: all(0), // a rewrite with more shards: its copy counts
	}
	best := map[string]copyKey{"a": {1, "a", off(8.2)}, "b": {1, "b", off(9.7)}, "c": {0, "c", off(3)}, "d": {0, "d", off(4.5)}}
	got := strings.Join(r.whereShort(want, count, best), "\n")
	exp := "1 acked stripes of partition 0 miss the shard of n0 (position 0), at offsets 4.5-4.5s into the load\n" +
		"2 acked stripes of partition 1 miss the shard of n1 (position 4), at offsets 8.2-9.7s into the load"
	if got != exp {
		t.Fatalf("got\n%s\nwant\n%s", got, exp)
	}
}
