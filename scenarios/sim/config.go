package sim

import (
	"fmt"
	"time"

	"github.com/raidq/raidq/actors/core"
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

	inject bugs // deliberate bugs in the simulated actors (tests only)
}

// bugs are deliberate mistakes the tests inject into the simulated actors
// and, through core.ReaderBugs, into the reader core, to show that the
// checks catch them.
type bugs struct {
	ackEarly       bool // nodes answer OK before the write is durable
	unheardAsEmpty bool // readers take a node that did not answer for an empty one
	openWindow     bool // owners accept any old offset, and scans do not seal
	amnesia        bool // owners rebuilt after a crash forget their durable slots
	probeBlind     bool // nodes answer every probe with "nothing after" (After 0)
	// reader re-creates fixed read-path bugs inside core.Reader itself
	// (the findings 1, 2, 3 and 6), to show the checks catch them.
	reader core.ReaderBugs
}

// DefaultConfig is a small healthy cluster with every fault at its bound.
func DefaultConfig(seed uint64) Config {
	return Config{Seed: seed, Nodes: 6, K: 4, W: 4, Producers: 2, Readers: 2, Stripes: 20, MaxRecords: 3,
		StripeEvery: 10 * time.Millisecond, Crashes: 2, MaxCrash: 900 * time.Millisecond,
		DropRate: 0.01, DupRate: 0.01, SlowNodes: 1, PersistDelay: 3 * time.Millisecond,
		ProducerSkew: 200 * time.Millisecond, NodeSkew: 20 * time.Millisecond, ReaderSkew: 50 * time.Millisecond,
		ReaderRestarts: 1, ExpectNoFailures: true}
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
	return s
}

// Result is what one run did and what it broke.
type Result struct {
	Config Config

	Stripes, Acked, Failed int   // stripes sent, acked, failed by their producers
	AckedRecords           int   // records in acked stripes
	Delivered              []int // records delivered, per reader
	Voids, InDoubt         int   // reader verdicts (summed over readers)
	Duplicates, Corrupt    int   // copies skipped by dedupe; corrupt shards reported
	Stalls                 int   // main scans refused for too many unheard nodes
	Rescans                int   // rescans of unheard nodes
	Sealed, Ahead          int   // SEALED and CLOCK_AHEAD replies to producers
	Conflicts              int   // CONFLICT replies to producers
	Retries, Rewrites      int   // retry attempts; post-commit rewrites (§3.7)
	Crashes, Drops         int   // node crashes; messages lost
	Refused                int   // requests a fail-fast node answered with "no responders"
	LongCrashes            int   // crashes longer than InDoubtWait
	QuorumLosses           int   // windows with n-W+1 nodes down
	Excused                int   // failed sends excused by a quorum loss
	Probes, Skips          int   // probing scans applied; those that skipped empty time
	Late                   int   // records delivered late, from deferred in-doubt offsets
	AckedInDoubt           int   // in-doubt reports of acked stripes (each must still be delivered)
	Moved                  int   // stripes some readers delivered at another offset than others
	Redelivered            int   // stripes a restarted reader delivered again (subscribers dedupe)
	SimTime                time.Duration

	Violations []string
	Log        []string
}

// Broken reports whether the run broke any checked property.
func (r *Result) Broken() bool { return len(r.Violations) > 0 }

// Summary is a one-line account of the run.
func (r *Result) Summary() string {
	return fmt.Sprintf("stripes=%d acked=%d failed=%d records=%d delivered=%v voids=%d in-doubt=%d dups=%d "+
		"stalls=%d rescans=%d sealed=%d ahead=%d conflicts=%d retries=%d rewrites=%d crashes=%d drops=%d "+
		"refused=%d long=%d quorum-loss=%d excused=%d probes=%d skips=%d late=%d acked-in-doubt=%d moved=%d redelivered=%d sim=%v violations=%d",
		r.Stripes, r.Acked, r.Failed, r.AckedRecords, r.Delivered, r.Voids, r.InDoubt, r.Duplicates,
		r.Stalls, r.Rescans, r.Sealed, r.Ahead, r.Conflicts, r.Retries, r.Rewrites, r.Crashes, r.Drops,
		r.Refused, r.LongCrashes, r.QuorumLosses, r.Excused, r.Probes, r.Skips, r.Late, r.AckedInDoubt, r.Moved, r.Redelivered, r.SimTime.Round(time.Millisecond), len(r.Violations))
}
