package raidq

import (
	"context"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/drillhooks"
)

// Settings that drills need and applications do not, kept off the API:
// a client clock other than the wall clock (the skew and conflict drills
// set producer clocks off the nodes'), a fixed producer seed
// (reproducible drills and demos), and a group member over ports of the
// caller's (the simulation runs the shipped member against its simulated
// KV and readers). The repository's scenarios reach them through package
// actors/drillhooks, which this file fills in.

// withClock replaces the client clock (unix ns).
func withClock(now func() int64) Option { return func(o *options) { o.now = now } }

// withSeed seeds the producer's random choices (conflict jitter); 0: random.
func withSeed(s uint64) ProducerOption { return func(c *producerConfig) { c.cfg.Seed = s } }

// portsGroupConsumer starts a group member over p's ports, with no client
// (drillhooks.GroupConsumer): the same checks, join and loop as
// Client.Consumer with WithGroup; no lag gauge, no refusals.
func portsGroupConsumer(p drillhooks.GroupPorts) (any, func(), error) {
	opts := consumerConfig{Group: p.Group, Member: p.Member, From: p.From, AutoCommit: p.AutoCommit,
		SessionTimeout: p.Session, Buffer: p.Buffer}
	if opts.Buffer <= 0 {
		opts.Buffer = 1024
	}
	if err := groupOptions(&opts); err != nil {
		return nil, nil, err
	}
	if err := kafkaNameFree(p.Logger, p.KV, opts.Group); err != nil {
		return nil, nil, err
	}
	ports := consumerPorts{catalog: p.Catalog, logger: p.Logger,
		newReader: func(cfg actors.ReaderConfig) (partReader, error) {
			r, err := p.NewReader(cfg)
			if err != nil {
				return nil, err
			}
			return r, nil
		}}
	cons, err := startGroup(nil, ports, p.KV, p.Topic, opts, context.Background(), func() {}, p.Bugs)
	if err != nil {
		return nil, nil, err
	}
	return cons, cons.kill, nil
}

func init() {
	drillhooks.Clock = func(now func() int64) any { return withClock(now) }
	drillhooks.Seed = func(seed uint64) any { return withSeed(seed) }
	drillhooks.GroupConsumer = portsGroupConsumer
}
