package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/actors/drillhooks"
	"github.com/raidq/raidq/stripe/quorum"
)

// Config is one simulated scenario. The zero value of every fault knob
// means "no such fault"; Seed drives every random choice.
type Config struct {
	Seed       uint64
	Nodes      int // ensemble size n
	K, W       int // data shards, write quorum
	Producers  int
	Readers    int
	Stripes    int // stripes per producer
	MaxRecords int // records per stripe: 1..MaxRecords

	StripeEvery time.Duration // mean gap between one producer's stripes

	// Faults.
	Crashes      int           // node crashes to schedule
	MaxCrash     time.Duration // longest crash; must stay below the readers' InDoubtWait
	DropRate     float64       // probability that any one message is lost
	DupRate      float64       // probability that a write request is delivered twice
	SlowNodes    int           // nodes whose every message takes 50-150 ms more
	PersistDelay time.Duration // longest time for a write or seal to become durable

	ProducerSkew time.Duration // producer clocks are off by up to ± this
	NodeSkew     time.Duration // node clocks ± this
	ReaderSkew   time.Duration // reader clocks ± this

	// ConflictQuantum > 0 is the conflict mode: producers share one clock,
	// quantize it to this step, start their stripes together and learn
	// node clocks only from refusals, so they keep racing for one offset.
	ConflictQuantum time.Duration

	// ReaderRestarts: readers replaced by a fresh core.Reader resumed after
	// their last delivered record (the fan-out reader's failover, §8).
	ReaderRestarts int
	// ExpectNoFailures makes a failed send a violation: within the fault
	// model every send is eventually acked. Sends attempted while a
	// QuorumLoss window is open are excused (they must fail with a clear
	// error, or be acked).
	ExpectNoFailures bool

	// Fault kinds beyond the basic model (outage.go, clock.go, probe.go).
	// Zero means off for every one of them.

	// FailFast is the fraction of crashes that fail fast: the node's port
	// refuses, so every request to it fails at once (the NATS request
	// returns "no responders") instead of hanging until the timeout.
	FailFast float64
	// LongCrashes: crashes longer than the readers' InDoubtWait, each up to
	// MaxLongCrash, still with at most n-W nodes down at once.
	LongCrashes  int
	MaxLongCrash time.Duration
	// QuorumLoss > 0 takes n-W+1 nodes down together for about this long,
	// once, during the writes: no write can commit then, and readers must
	// wait for the nodes rather than pass committed stripes.
	QuorumLoss time.Duration
	// NodeOffset: the nodes' clocks are off together by up to ± this, on
	// top of NodeSkew (an ensemble synced to a wrong time source).
	NodeOffset time.Duration
	// FastReader: reader r0's clock runs this much fast on top of
	// ReaderSkew. Beyond D-A this is a misconfiguration the protocol must
	// survive through the nodes' clocks (their seals refuse the future).
	FastReader time.Duration
	// ReaderBehind: readers start this much earlier than usual, over empty
	// time, so their first scans probe and skip (core.Scan.Probe).
	ReaderBehind time.Duration
	// ReaderLate: readers start this late (true time), after much of the
	// data is written, so a probe lands on data (NodeResult.After).
	ReaderLate time.Duration

	// The metadata KV and what uses it (kv.go, group.go, lease.go).
	KV    KVConfig
	Group GroupConfig
	Lease LeaseConfig
	// Kafka: gateways running the shipped Kafka group coordinator and a
	// group's consumers (kafka_group.go).
	Kafka KafkaConfig
	// Wipes: nodes that crash, lose their whole store and restart as a new
	// incarnation (wipe.go), each with its clock set back by up to
	// WipeClockBack (a replacement machine not yet synced).
	Wipes         int
	WipeClockBack time.Duration

	// RepairEvery > 0 runs every node's repair loop (repair.go) with a
	// pass this often, and the in-doubt re-append (reappend.go).
	RepairEvery time.Duration

	// Grid is the topic's offset grid in ns (quorum.Params.Grid, grid.go):
	// quorum.DefaultGrid in DefaultConfig; 0 is a topic without one.
	Grid uint64

	// Latency is the topic's latency profile (quorum.Profile): "" or
	// "default", or "low" (A = D = 20 ms).
	Latency string
	// StepBack: every crashed node restarts with its clock stepped back by
	// up to this much (its durable clock floor must keep it refusing the
	// offsets it closed for readers before the crash).
	StepBack time.Duration
	// Alter: a `topic alter` of the accept window (and the read delay) during
	// the writes, which nodes and readers learn at different times (alter.go).
	Alter bool
	// AlterFactor scales the accept window at the alter (0: one of 1/4,
	// 1/2, 2, 4 drawn from the seed).
	AlterFactor float64

	inject bugs // deliberate bugs in the simulated actors (tests only)
}

// KVConfig is the metadata KV's fault plan (kv.go).
type KVConfig struct {
	Stalls   int           // stalls of 1 s to MaxStall where every call fails or hangs
	MaxStall time.Duration // longest stall
	Drop     float64       // probability that a KV request or reply is lost
	LostAcks float64       // probability that a write is applied but its reply lost
	// PartialLists: the probability that a List runs for up to ListTime
	// and quietly misses every key written while it runs (a JetStream key
	// listing ends by pending counts).
	PartialLists float64
	ListTime     time.Duration
	// MaxStale > 0: stale reads. For StaleFor after each stall and after
	// each cut-off (the client cut off), and in StaleWindows random windows
	// of StaleFor for one client, half the Gets and Lists answer from the
	// KV as it was when the fault began, at most MaxStale before (a lagging
	// replica, a former leader resuming); writes always apply to the
	// current state.
	MaxStale     time.Duration
	StaleFor     time.Duration
	StaleWindows int
}

// GroupConfig is one consumer group reading the partition (group.go).
// Members 0 means no group.
type GroupConfig struct {
	Members    int           // member processes, all joining at the start
	Session    time.Duration // every member's session timeout (3 s .. 15 s in raidq)
	AutoCommit time.Duration // commit interval
	Skew       time.Duration // member clocks ± this
	Drift      int64         // member clock rates ± this many ppm
	Crashes    int           // member crashes; each restarts after 0.5-6 s, with its id or a fresh one
	Leaves     int           // graceful leaves (Close); each rejoins after 1-5 s with a fresh id
	CutOffs    int           // per-member KV cut-offs of 1 s to MaxCut
	MaxCut     time.Duration
	// Gaps re-creates behaviours of groups.go as it is that the simulated
	// member does not have by default (GroupGaps); each breaks a check.
	Gaps GroupGaps
}

// GroupGaps are behaviours of groups.go (and core.PlanGroup) as they are
// that break the group checks; the simulated member does without them by
// default (group.go says how) and TestSimGroupGaps shows each is caught.
type GroupGaps uint8

const (
	// GapRoundPause: the pause is checked only once per round, after the
	// heartbeat (groupState.round). A round takes up to the heartbeat's
	// 2 s timeout plus the listing's 3 s deadline, so a member cut off
	// from the KV pauses seconds after PauseAfter(session), after the
	// others may have claimed its partitions. Default (groups.go since the
	// simulation found it): a timer pauses the member PauseAfter after
	// its last heartbeat that returned OK.
	GapRoundPause GroupGaps = 1 << iota
	// GapKeepOrphans: a position record that names the member though it
	// neither holds nor is assigned the partition stays so (PlanGroup has
	// no move for it): a claim or commit applied while its reply was lost
	// (the member's next write, with the old revision, is fenced, and a
	// release so fenced ends as if done). The assignee waits for ever.
	// Default (core.PlanGroup's Orphans since): the member releases it.
	GapKeepOrphans
	// GapStaleHold: a held partition whose record was rewritten by
	// another (another member claimed and released it while this one's
	// listing failed) stays held when the record names no owner
	// (PlanGroup fences only on another owner's name): the member reads
	// on from its old position, and a third member may claim the released
	// record meanwhile. Default (core.PlanGroup since): a held partition
	// whose record another rewrote after the member's last write is
	// fenced, then claimed again.
	GapStaleHold
	// GapResumeBlind: a paused member resumes delivery as soon as a
	// heartbeat succeeds. Another member may have judged it dead from a
	// listing taken before that heartbeat and claim meanwhile, so both
	// deliver until the next round. Default (groups.go since): it first
	// rewrites every held record as its own (compare-and-set), dropping
	// those it lost.
	GapResumeBlind

	GapsAll = GapRoundPause | GapKeepOrphans | GapStaleHold | GapResumeBlind
)

var gapNames = []struct {
	g    GroupGaps
	name string
}{{GapRoundPause, "round-pause"}, {GapKeepOrphans, "keep-orphans"}, {GapStaleHold, "stale-hold"}, {GapResumeBlind, "resume-blind"}}

func (g GroupGaps) String() string {
	var out []string
	for _, n := range gapNames {
		if g&n.g != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// LeaseConfig is the fan-out lease of the partition, competed for by
// Holders simulated nodes (lease.go). Holders 0 means no lease.
type LeaseConfig struct {
	Holders int
	TTL     time.Duration // fanout.Config.LeaseTTL
	Skew    time.Duration // holder clocks ± this
	Drift   int64         // holder clock rates ± this many ppm
	Crashes int           // holder crashes (kill: no release); each restarts after 1-8 s
	Leaves  int           // graceful stops (release); each restarts after 1-5 s
	CutOffs int           // per-holder KV cut-offs of 1 s to 2 TTL
}

// bugs are deliberate mistakes the tests inject into the simulated actors
// and, through core.ReaderBugs, into the reader core, to show that the
// checks catch them.
type bugs struct {
	ackEarly       bool // nodes answer OK before the write is durable
	unheardAsEmpty bool // readers take a node that did not answer for an empty one
	openWindow     bool // owners accept any old offset, yet nodes close their clock minus A for readers
	noFloor        bool // a restarted node forgets its durable clock floor (core.ClockFloor)
	alterInPlace   bool // an accept-window change applies to every range at once, owners reloaded (alter.go)
	amnesia        bool // owners rebuilt after a crash forget their durable slots
	probeBlind     bool // nodes answer every probe with "nothing after" (After 0)
	// reader re-creates fixed read-path bugs inside core.Reader itself
	// (the findings 1, 2, 3 and 6), to show the checks catch them.
	reader core.ReaderBugs
	// Consumer groups: fixed mistakes of the shipped member, re-created
	// in it (group.go, drillhooks.GroupBugs).
	group drillhooks.GroupBugs
	// Fan-out lease (lease.go): judge a lease lapsed when the observer's
	// clock passes the expiry the holder wrote with its own clock.
	leaseExpiry bool
	// Repair (repair.go): the walk marks ranges settled without applying
	// their fixes.
	repairSkipFix bool
	// Repair: a node takes a fetched source's shard as its own (its index
	// rewritten, CRCs valid) instead of rebuilding it (no RebuildShard).
	repairNoProof bool
	// Repair: the walk plans without the node's own slots and every repair
	// write claims the slot's bytes corrupt, so the owner replaces
	// whatever good shard holds it.
	repairReplace bool
	// Wipes (wipe.go): the new incarnation's birth from its own clock
	// (core.BirthInput.Own alone), not from cluster time.
	birthOwnClock bool
	// Grid (grid.go): producers write as if the topic had no offset grid
	// (a producer older than it); the owners refuse them.
	ignoreGrid bool
}

// DefaultConfig is a small healthy cluster with every fault at its bound.
func DefaultConfig(seed uint64) Config {
	return Config{Seed: seed, Nodes: 6, K: 4, W: 4, Producers: 2, Readers: 2, Stripes: 20, MaxRecords: 3,
		StripeEvery: 10 * time.Millisecond, Crashes: 2, MaxCrash: 900 * time.Millisecond,
		DropRate: 0.01, DupRate: 0.01, SlowNodes: 1, PersistDelay: 3 * time.Millisecond,
		ProducerSkew: 200 * time.Millisecond, NodeSkew: 20 * time.Millisecond, ReaderSkew: 50 * time.Millisecond,
		ReaderRestarts: 1, ExpectNoFailures: true, Grid: quorum.DefaultGrid}
}

func (c Config) String() string {
	s := fmt.Sprintf("seed=%d n=%d k=%d W=%d producers=%d readers=%d stripes=%d records<=%d every=%v "+
		"crashes=%d<=%v drop=%.3f dup=%.2f slow=%d persist<=%v skew=±%v/±%v/±%v conflict=%v reader-restarts=%d",
		c.Seed, c.Nodes, c.K, c.W, c.Producers, c.Readers, c.Stripes, c.MaxRecords, c.StripeEvery,
		c.Crashes, c.MaxCrash, c.DropRate, c.DupRate, c.SlowNodes, c.PersistDelay,
		c.ProducerSkew, c.NodeSkew, c.ReaderSkew, c.ConflictQuantum, c.ReaderRestarts)
	// The newer knobs print only when set, so old configs read as before.
	if c.FailFast > 0 {
		s += fmt.Sprintf(" fail-fast=%.2f", c.FailFast)
	}
	if c.LongCrashes > 0 {
		s += fmt.Sprintf(" long-crashes=%d<=%v", c.LongCrashes, c.MaxLongCrash)
	}
	if c.QuorumLoss > 0 {
		s += fmt.Sprintf(" quorum-loss=%v", c.QuorumLoss)
	}
	if c.NodeOffset > 0 {
		s += fmt.Sprintf(" node-offset=±%v", c.NodeOffset)
	}
	if c.FastReader > 0 {
		s += fmt.Sprintf(" fast-reader=+%v", c.FastReader)
	}
	if c.ReaderBehind > 0 || c.ReaderLate > 0 {
		s += fmt.Sprintf(" reader-behind=%v reader-late=%v", c.ReaderBehind, c.ReaderLate)
	}
	if c.KV != (KVConfig{}) {
		s += fmt.Sprintf(" kv-stalls=%d<=%v kv-drop=%.3f kv-lost-acks=%.3f", c.KV.Stalls, c.KV.MaxStall, c.KV.Drop, c.KV.LostAcks)
		if k := c.KV; k.PartialLists > 0 {
			s += fmt.Sprintf(" kv-partial=%.2f<=%v", k.PartialLists, k.ListTime)
		}
		if k := c.KV; k.MaxStale > 0 {
			s += fmt.Sprintf(" kv-stale<=%v for=%v windows=%d", k.MaxStale, k.StaleFor, k.StaleWindows)
		}
	}
	if g := c.Group; g.Members > 0 {
		s += fmt.Sprintf(" group=%d session=%v commit=%v skew=±%v drift=±%dppm crashes=%d leaves=%d cut-offs=%d<=%v gaps=%s",
			g.Members, g.Session, g.AutoCommit, g.Skew, g.Drift, g.Crashes, g.Leaves, g.CutOffs, g.MaxCut, g.Gaps)
	}
	if l := c.Lease; l.Holders > 0 {
		s += fmt.Sprintf(" lease=%d ttl=%v skew=±%v drift=±%dppm crashes=%d leaves=%d cut-offs=%d",
			l.Holders, l.TTL, l.Skew, l.Drift, l.Crashes, l.Leaves, l.CutOffs)
	}
	if c.Wipes > 0 {
		s += fmt.Sprintf(" wipes=%d clock-back<=%v", c.Wipes, c.WipeClockBack)
	}
	if c.RepairEvery > 0 {
		s += fmt.Sprintf(" repair-every=%v", c.RepairEvery)
	}
	if c.Grid > 1 {
		s += fmt.Sprintf(" grid=%d", c.Grid)
	}
	return s
}

// Result is what one run did and what it broke.
type Result struct {
	Config Config

	Stripes, Acked, Failed int           // stripes sent, acked, failed by their producers
	AckedRecords           int           // records in acked stripes
	Delivered              []int         // records delivered, per reader
	Voids, InDoubt         int           // reader verdicts (summed over readers)
	Duplicates, Corrupt    int           // copies skipped by dedupe; corrupt shards reported
	Stalls                 int           // main scans refused for too many unheard nodes
	Shorts                 int           // main scans the nodes closed less of than asked (a reader's clock ahead of theirs)
	Rescans                int           // rescans of unheard nodes
	Suspects               int           // nodes a reader marked suspect (a scan timed out: 150 ms timeouts until it answers)
	Sealed, Ahead          int           // SEALED and CLOCK_AHEAD replies to producers
	Conflicts              int           // CONFLICT replies to producers
	Retries, Rewrites      int           // retry attempts; post-commit rewrites (§3.7)
	Crashes, Drops         int           // node crashes; messages lost
	Refused                int           // requests a fail-fast node answered with "no responders"
	LongCrashes            int           // crashes longer than InDoubtWait
	QuorumLosses           int           // windows with n-W+1 nodes down
	Excused                int           // failed sends excused by a quorum loss
	Probes, Skips          int           // probing scans applied; those that skipped empty time
	Late                   int           // records delivered late, from deferred in-doubt offsets
	AckedInDoubt           int           // in-doubt reports of acked stripes (each must still be delivered)
	Moved                  int           // stripes some readers delivered at another offset than others
	Redelivered            int           // stripes a restarted reader delivered again (subscribers dedupe)
	MaxLag                 time.Duration // longest readable-to-delivered time of an acked record (progress.go)
	KVCalls, KVFailed      int           // metadata KV calls; those that failed or timed out
	KVStalls, KVCutOffs    int           // KV stalls; clients cut off from the KV
	KVPartialLists         int           // KV listings that missed keys written while they ran
	KVStaleReads           int           // KV reads answered from an old state
	// Consumer group (group.go).
	GroupDelivered int // records the group's members delivered
	GroupDups      int // records the group delivered more than once (at-least-once across failures)
	Claims, Fenced int // partition claims; holdings fenced by a takeover
	Releases       int // partitions released (handover or leave)
	Pauses         int // members that paused delivery
	MemberCrashes  int // member crashes
	CappedCommits  int // commits held back at the reader's LowWater
	Handovers      int // times the partition's reading moved to another member
	Orphans        int // orphan position records released (group.go, orphans)
	// Fan-out lease (lease.go).
	LeaseTakes    int           // leases taken
	LeaseMoves    int           // takes by another holder than the last publisher
	LeaseMaxGap   time.Duration // longest time with no holder publishing (fault windows aside)
	HolderCrashes int
	// Wipes (wipe.go).
	Wiped          int // nodes wiped and reborn
	UnknownAnswers int // scans answered "unknown" below a birth
	WipeLost       int // acked stripes a wipe left with fewer than k shards (kept in doubt)
	// Repair (repair.go, reappend.go).
	RepairPasses    int // repair passes run (all nodes)
	RepairedShards  int // shards repair rebuilt and wrote
	RepairConflicts int // acked stripes short of n shards where another stripe's shard holds the slot (write-once)
	Reappended      int // in-doubt stripes re-appended at a fresh offset
	Holes           int // offsets a reborn node's repair left unknown for good
	SimTime         time.Duration

	Violations []string
	Log        []string
}

// Broken reports whether the run broke any checked property.
func (r *Result) Broken() bool { return len(r.Violations) > 0 }

// Summary is a one-line account of the run.
func (r *Result) Summary() string {
	return fmt.Sprintf("stripes=%d acked=%d failed=%d records=%d delivered=%v voids=%d in-doubt=%d dups=%d "+
		"stalls=%d shorts=%d rescans=%d sealed=%d ahead=%d conflicts=%d retries=%d rewrites=%d crashes=%d drops=%d "+
		"refused=%d long=%d quorum-loss=%d excused=%d probes=%d skips=%d late=%d acked-in-doubt=%d moved=%d redelivered=%d suspects=%d max-lag=%v "+
		"kv-calls=%d kv-failed=%d group-delivered=%d group-dups=%d claims=%d fenced=%d releases=%d orphans=%d pauses=%d handovers=%d capped=%d "+
		"lease-takes=%d lease-moves=%d lease-max-gap=%v wiped=%d unknown=%d wipe-lost=%d sim=%v violations=%d",
		r.Stripes, r.Acked, r.Failed, r.AckedRecords, r.Delivered, r.Voids, r.InDoubt, r.Duplicates,
		r.Stalls, r.Shorts, r.Rescans, r.Sealed, r.Ahead, r.Conflicts, r.Retries, r.Rewrites, r.Crashes, r.Drops,
		r.Refused, r.LongCrashes, r.QuorumLosses, r.Excused, r.Probes, r.Skips, r.Late, r.AckedInDoubt, r.Moved, r.Redelivered,
		r.Suspects, r.MaxLag.Round(time.Millisecond), r.KVCalls, r.KVFailed, r.GroupDelivered, r.GroupDups, r.Claims, r.Fenced, r.Releases,
		r.Orphans, r.Pauses, r.Handovers, r.CappedCommits, r.LeaseTakes, r.LeaseMoves, r.LeaseMaxGap.Round(time.Millisecond),
		r.Wiped, r.UnknownAnswers, r.WipeLost, r.SimTime.Round(time.Millisecond), len(r.Violations)) + r.repairSummary()
}
