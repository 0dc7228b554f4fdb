// Package drillhooks reaches the settings of a raidq client that are
// not part of its API, for this repository's drills and demos
// (scenarios/drill, scenarios/demo): a producer clock other than the
// wall clock, and a fixed seed for a producer's random choices.
// Applications have no use for them; their shape may change at any time.
//
// Package raidq sets the hooks when it is initialized, so they are nil
// in a program that does not link it. Each returns an option of package
// raidq as an any, since this package cannot import raidq:
//
//	c, err := raidq.Connect(url, drillhooks.Clock(skewed).(raidq.Option))
//	p, err := c.Producer(topic, drillhooks.Seed(seed).(raidq.ProducerOption))
package drillhooks

// Clock returns a raidq.Option that gives the client the clock now
// (unix ns) instead of the wall clock: the skew drill sets producer
// clocks off the nodes', the conflict drill quantizes them.
var Clock func(now func() int64) any

// Seed returns a raidq.ProducerOption that seeds the producer's random
// choices (conflict jitter); 0: random, as without it.
var Seed func(seed uint64) any
