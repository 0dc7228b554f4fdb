package sim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq/actors/kafka"
)

var (
	flagKafkaSeeds  = flag.Int("sim.kafka-seeds", 200, "seeds TestSimKafkaGroup runs")
	flagKafkaSeed   = flag.Uint64("sim.kafka-seed", 0, "run only this seed in TestSimKafkaGroup")
	flagKafkaFrom   = flag.Uint64("sim.kafka-from", 1, "the first seed TestSimKafkaGroup runs")
	flagKafkaReplay = flag.Bool("sim.kafka-replay", false, "run TestSimKafkaDeterministic (not every Kafka seed replays yet)")
)

// kafkaConfig draws a Kafka group scenario from the seed: 2-3 gateways,
// 2-5 members on 2-6 partitions, gateway crashes and graceful stops,
// views of the gateways up to 2 s apart (the registry's beat), member
// crashes, leaves and late joins, KV stalls, lost messages and acks, and
// gateway cut-offs. No producers or readers: only the group runs.
func kafkaConfig(seed uint64) Config {
	c := DefaultConfig(seed)
	c.Producers, c.Readers, c.Stripes, c.Crashes, c.ReaderRestarts, c.DropRate, c.DupRate = 0, 0, 0, 0, 0, 0, 0
	r := rand.New(rand.NewPCG(seed, 0x4b61666b61))
	c.Kafka = KafkaConfig{Gateways: 2 + r.IntN(2), Members: 2 + r.IntN(4), Partitions: 2 + r.IntN(5),
		Session: time.Duration(3+r.IntN(4)) * time.Second, Crashes: r.IntN(3), Leaves: r.IntN(3),
		Lag: time.Duration(r.IntN(2001)) * time.Millisecond, Detect: 3 * time.Second,
		MemberCrashes: r.IntN(3), MemberLeaves: r.IntN(2), LateJoins: r.IntN(2), CutOffs: r.IntN(3),
		Skew: 2 * time.Second, Drift: 1000}
	c.KV = KVConfig{Stalls: r.IntN(3), MaxStall: 4 * time.Second, Drop: 0.003 * float64(r.IntN(2)), LostAcks: 0.03 * float64(r.IntN(2))}
	return c
}

// kafkaTally sums the Kafka part's counts over seeds (from each run's
// closing "kafka: done" line).
type kafkaTally struct {
	seeds, generations, takeovers, commits, fetches, rejoins, excused, crashes, leaves, handover, handoverSeeds int
	maxSettle                                                                                                   time.Duration
}

func (a *kafkaTally) add(t *testing.T, res *Result) {
	for _, l := range res.Log {
		i := strings.Index(l, "kafka: done ")
		if i < 0 {
			continue
		}
		var st kstats
		var settle string
		if _, err := fmt.Sscanf(l[i:], "kafka: done generations=%d takeovers=%d commits=%d fetches=%d rejoins=%d excused=%d gw-crashes=%d gw-leaves=%d handover-misses=%d max-settle=%s",
			&st.generations, &st.takeovers, &st.commits, &st.fetches, &st.rejoins, &st.excused, &st.crashes, &st.leaves, &st.handover, &settle); err != nil {
			t.Fatalf("reading %q: %v", l, err)
		}
		d, _ := time.ParseDuration(settle)
		a.seeds++
		a.generations += st.generations
		a.takeovers += st.takeovers
		a.commits += st.commits
		a.fetches += st.fetches
		a.rejoins += st.rejoins
		a.excused += st.excused
		a.crashes += st.crashes
		a.leaves += st.leaves
		a.handover += st.handover
		if st.handover > 0 {
			a.handoverSeeds++
		}
		a.maxSettle = max(a.maxSettle, d)
	}
}

func (a kafkaTally) String() string {
	return fmt.Sprintf("seeds=%d generations=%d takeovers=%d commits=%d fetches=%d rejoins=%d excused=%d gw-crashes=%d gw-leaves=%d handover-misses=%d in %d seeds max-settle=%v",
		a.seeds, a.generations, a.takeovers, a.commits, a.fetches, a.rejoins, a.excused, a.crashes, a.leaves, a.handover, a.handoverSeeds, a.maxSettle)
}

func reportKafkaFailure(t *testing.T, seed uint64, res *Result) {
	t.Helper()
	tail := res.Log[max(len(res.Log)-tailLines, 0):]
	t.Errorf("seed %d FAILED\nconfig: %+v\nviolations:\n  %s\nlast %d of %d log lines:\n%s\nreplay: go test ./scenarios/sim -run 'TestSimKafkaGroup$' -sim.kafka-seed=%d -v",
		seed, res.Config.Kafka, strings.Join(res.Violations, "\n  "), len(tail), len(res.Log), strings.Join(tail, "\n"), seed)
}

// TestSimKafkaGroup runs the shipped Kafka group coordinator over
// kafkaConfig's seeds: one owner per partition per generation, no
// acknowledged commit lost, and the group settles once faults end.
func TestSimKafkaGroup(t *testing.T) {
	from := *flagKafkaFrom
	to := from + uint64(*flagKafkaSeeds) - 1
	if *flagKafkaSeed != 0 {
		from, to = *flagKafkaSeed, *flagKafkaSeed
	}
	var total kafkaTally
	for seed := from; seed <= to; seed++ {
		res := Run(t, kafkaConfig(seed))
		if testing.Verbose() && from == to {
			for _, l := range res.Log {
				t.Log(l)
			}
		}
		if res.Broken() {
			reportKafkaFailure(t, seed, &res)
			return
		}
		total.add(t, &res)
	}
	// excused stays 0: commits are written through, so a gateway that
	// ends takes no acknowledged commit with it.
	if to-from > 50 && (total.takeovers == 0 || total.crashes == 0 || total.leaves == 0 || total.rejoins == 0) {
		t.Fatalf("the faults were not exercised: %s", total)
	}
	t.Logf("kafka group: %s", total)
}

// TestSimKafkaDeterministic: a Kafka seed replays to the same op log,
// line for line. Not yet for every seed: requests a gateway held while it
// could not load the group (a KV stall) are released at one instant and
// race for the group's lock, as they do in a gateway, so the order of the
// following writes, and the op log, can differ (seed 100, most often
// under CPU load). Until the simulation orders them, this runs only with
// -sim.kafka-replay; a failing Kafka seed still prints its log.
func TestSimKafkaDeterministic(t *testing.T) {
	if !*flagKafkaReplay {
		t.Skip("Kafka seeds do not all replay yet (requests released together after a stall race for the group's lock); run with -sim.kafka-replay")
	}
	for seed := uint64(1); seed <= 100; seed++ {
		cfg := kafkaConfig(seed)
		a, b := Run(t, cfg), Run(t, cfg)
		for i := range min(len(a.Log), len(b.Log)) {
			if a.Log[i] != b.Log[i] {
				t.Fatalf("seed %d: log line %d differs:\n%s\n%s\nbefore:\n%s", seed, i, a.Log[i], b.Log[i], strings.Join(a.Log[max(i-8, 0):i], "\n"))
			}
		}
		if len(a.Log) != len(b.Log) {
			t.Fatalf("seed %d: %d then %d log lines", seed, len(a.Log), len(b.Log))
		}
	}
}

// TestSimKafkaCatchesBugs injects a bug into the shipped coordinator
// (kafka.CoordinatorConfig.Bugs) and expects the checks to catch it
// within 200 seeds.
func TestSimKafkaCatchesBugs(t *testing.T) {
	cases := []struct {
		name string
		bug  kafka.CoordinatorBugs
	}{
		{name: "takeover without the stored offsets", bug: kafka.CoordinatorBugs{TakeoverWithoutOffsets: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 200; seed++ {
				cfg := kafkaConfig(seed)
				cfg.Kafka.bugs = tc.bug
				if res := Run(t, cfg); res.Broken() {
					t.Logf("seed %d: %s", seed, res.Violations[0])
					return
				}
			}
			t.Fatal("200 seeds and the bug went unnoticed")
		})
	}
}

// TestSimKafkaHandover: the handover race the simulation found (seed 77,
// KafkaConfig.strict): the coordinator acknowledged OffsetCommit once the
// offsets were in memory and wrote them behind (within WriteEvery, or
// after KVTimeout when a reply was lost), so a successor that took the
// group over meanwhile loaded the record without them and answered
// OffsetFetch below acknowledged commits (k0.2 acknowledged p0=78 and
// p2=102, its write was lost, k1.3 answered p0=49, p2=68). Commits are
// now written through (acknowledged once in the record): with strict
// checks the seed, and the reconcile seeds, pass.
func TestSimKafkaHandover(t *testing.T) {
	for _, seed := range []uint64{77, 793, 818} {
		cfg := kafkaConfig(seed)
		cfg.Kafka.strict = true
		if res := Run(t, cfg); res.Broken() {
			reportKafkaFailure(t, seed, &res)
		}
	}
}

// TestSimKafkaReconcile replays the seeds on which the simulation found
// an acknowledged commit lost by the merge after a lost compare-and-set
// (coordinator_write.go, reconcile, which let "the commits acknowledged
// here and not yet written win the merge"). Seed 793: coordination moved
// from k2 to k0 while k2 still thought it coordinated (the views' lag); a
// hanging KV stall held k2's flush; k0 took the group over, acknowledged
// newer commits (p0=45, p1=56) and wrote them; k2's flush, fenced,
// re-read the record and wrote its older commits (p0=16, p1=20) over
// k0's; k0, fenced in turn, took them and answered OffsetFetch for p0
// with 16. Seed 818: the same after k1 was cut off from the KV and then
// stopped gracefully. The record's offsets now stand over commits of a
// generation the group has left or of a partition written since.
func TestSimKafkaReconcile(t *testing.T) {
	for _, seed := range []uint64{793, 818} {
		if res := Run(t, kafkaConfig(seed)); res.Broken() {
			reportKafkaFailure(t, seed, &res)
		}
	}
}
