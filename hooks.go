package raidq

import "github.com/raidq/raidq/actors/drillhooks"

// Settings that drills need and applications do not, kept off the API:
// a client clock other than the wall clock (the skew and conflict drills
// set producer clocks off the nodes') and a fixed producer seed
// (reproducible drills and demos). The repository's scenarios reach them
// through package actors/drillhooks, which this file fills in.

// withClock replaces the client clock (unix ns).
func withClock(now func() int64) Option { return func(o *options) { o.now = now } }

// withSeed seeds the producer's random choices (conflict jitter); 0: random.
func withSeed(s uint64) ProducerOption { return func(c *producerConfig) { c.cfg.Seed = s } }

func init() {
	drillhooks.Clock = func(now func() int64) any { return withClock(now) }
	drillhooks.Seed = func(seed uint64) any { return withSeed(seed) }
}
