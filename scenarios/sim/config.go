package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
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
	// model every send is eventually acked.
	ExpectNoFailures bool

	inject bugs // deliberate bugs in the simulated actors (tests only)
}

// bugs are deliberate mistakes the tests inject into the simulated actors
// (never into the cores) to show that the checks catch them.
type bugs struct {
	ackEarly       bool // nodes answer OK before the write is durable
	unheardAsEmpty bool // readers take a node that did not answer for an empty one
	openWindow     bool // owners accept any old offset, and scans do not seal
	amnesia        bool // owners rebuilt after a crash forget their durable slots
}

// DefaultConfig is a small healthy cluster with every fault at its bound.
func DefaultConfig(seed uint64) Config {
	return Config{Seed: seed, Nodes: 6, K: 4, W: 4, Producers: 2, Readers: 2, Stripes: 20, MaxRecords: 3,
		StripeEvery: 10 * time.Millisecond, Crashes: 2, MaxCrash: 900 * time.Millisecond,
		DropRate: 0.01, DupRate: 0.01, SlowNodes: 1, PersistDelay: 3 * time.Millisecond,
		ProducerSkew: 200 * time.Millisecond, NodeSkew: 20 * time.Millisecond, ReaderSkew: 50 * time.Millisecond,
		ReaderRestarts: 1, ExpectNoFailures: true}
}

// SeedConfig draws a scenario from the seed: cluster size and load, and a
// mix of faults within the bounds of the fault model (see the package doc).
// About one seed in three runs in conflict mode.
func SeedConfig(seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	c := DefaultConfig(seed)
	c.Producers = 1 + r.IntN(3)
	c.Readers = 1 + r.IntN(3)
	c.Stripes = 10 + r.IntN(50)
	c.MaxRecords = 1 + r.IntN(4)
	c.StripeEvery = time.Duration(1+r.IntN(30)) * time.Millisecond
	c.Crashes = r.IntN(5)
	c.DropRate = []float64{0, 0.002, 0.01, 0.03}[r.IntN(4)]
	c.DupRate = []float64{0, 0.01, 0.05}[r.IntN(3)]
	c.SlowNodes = r.IntN(3)
	c.ReaderRestarts = r.IntN(3)
	c.PersistDelay = time.Duration(100+r.IntN(5000)) * time.Microsecond
	if r.IntN(5) == 0 {
		c.ProducerSkew = time.Second // beyond F: exercises CLOCK_AHEAD and the writer's skew correction
	}
	if r.IntN(3) == 0 {
		c.ConflictQuantum = []time.Duration{time.Millisecond, 100 * time.Microsecond}[r.IntN(2)]
		c.Producers = 2 + r.IntN(2)
	}
	return c
}

func (c Config) String() string {
	return fmt.Sprintf("seed=%d n=%d k=%d W=%d producers=%d readers=%d stripes=%d records<=%d every=%v "+
		"crashes=%d<=%v drop=%.3f dup=%.2f slow=%d persist<=%v skew=±%v/±%v/±%v conflict=%v reader-restarts=%d",
		c.Seed, c.Nodes, c.K, c.W, c.Producers, c.Readers, c.Stripes, c.MaxRecords, c.StripeEvery,
		c.Crashes, c.MaxCrash, c.DropRate, c.DupRate, c.SlowNodes, c.PersistDelay,
		c.ProducerSkew, c.NodeSkew, c.ReaderSkew, c.ConflictQuantum, c.ReaderRestarts)
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
		"stalls=%d rescans=%d sealed=%d ahead=%d conflicts=%d retries=%d rewrites=%d crashes=%d drops=%d moved=%d redelivered=%d sim=%v violations=%d",
		r.Stripes, r.Acked, r.Failed, r.AckedRecords, r.Delivered, r.Voids, r.InDoubt, r.Duplicates,
		r.Stalls, r.Rescans, r.Sealed, r.Ahead, r.Conflicts, r.Retries, r.Rewrites, r.Crashes, r.Drops, r.Moved, r.Redelivered, r.SimTime.Round(time.Millisecond), len(r.Violations))
}
