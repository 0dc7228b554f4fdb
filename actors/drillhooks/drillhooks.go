// Package drillhooks reaches the settings of a raidq client that are
// not part of its API, for this repository's drills, demos and the
// simulation (scenarios/drill, scenarios/demo, scenarios/sim): a producer
// clock other than the wall clock, a fixed seed for a producer's random
// choices, and a consumer-group member started over ports of the
// caller's (the simulation runs the shipped member against its simulated
// KV and readers). Applications have no use for them; their shape may
// change at any time.
//
// Package raidq sets the hooks when it is initialized, so they are nil
// in a program that does not link it. Each returns a value of package
// raidq as an any, since this package cannot import raidq:
//
//	c, err := raidq.Connect(url, drillhooks.Clock(skewed).(raidq.Option))
//	p, err := c.Producer(topic, drillhooks.Seed(seed).(raidq.ProducerOption))
//	cons, crash, err := drillhooks.GroupConsumer(ports) // cons.(*raidq.Consumer)
package drillhooks

import (
	"log/slog"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// Clock returns a raidq.Option that gives the client the clock now
// (unix ns) instead of the wall clock: the skew drill sets producer
// clocks off the nodes', the conflict drill quantizes them.
var Clock func(now func() int64) any

// Seed returns a raidq.ProducerOption that seeds the producer's random
// choices (conflict jitter); 0: random, as without it.
var Seed func(seed uint64) any

// GroupConsumer starts a consumer-group member (a *raidq.Consumer, as
// Client.Consumer with WithGroup starts it) over the ports p, with no
// NATS connection: it joins (one heartbeat) before it returns. crash
// ends it as a killed process ends: no commit, no release, no leave, its
// readers stopped and its Messages closed. Close is the graceful leave.
// Time is package time's (the simulation fakes it in a synctest bubble).
var GroupConsumer func(p GroupPorts) (consumer any, crash func(), err error)

// GroupPorts is what a group member started by GroupConsumer reaches the
// world through, and its options.
type GroupPorts struct {
	KV        meta.GroupKV
	Catalog   meta.Catalog
	NewReader func(actors.ReaderConfig) (PartitionReader, error)
	Logger    *slog.Logger

	Topic, Group, Member string
	// From is where a partition the group has no position for starts
	// (raidq.WithStart; zero: the topic's creation).
	From       time.Time
	Session    time.Duration // raidq.WithSessionTimeout
	AutoCommit time.Duration // raidq.WithAutoCommit
	Buffer     int           // raidq.WithBuffer (0: the default)

	// Bugs re-creates fixed mistakes of the member, for the simulation's
	// tests that its checks catch them; zero otherwise.
	Bugs GroupBugs
}

// PartitionReader is what a group member uses of a partition reader
// (*actors.Reader): the reader hands its deliveries to the
// ReaderConfig's Sink and scans no further until the sink returns.
type PartitionReader interface {
	Close()
	LowWater() core.Position
	Handed() uint64
}

// GroupBugs are fixed mistakes of the group member, re-created on demand
// for the simulation (scenarios/sim) to show its checks catch them. Real
// clients never set them.
type GroupBugs struct {
	// SkipConfirmMissing: a live member missing from a member listing is
	// taken for gone (before 1177bb4: no read by key, neither
	// confirmMissing nor confirmOwners).
	SkipConfirmMissing bool
	// HandOverRace: a message being handed over when its partition is
	// released still goes to the application, and the release does not
	// wait for it (before e3be1bd).
	HandOverRace bool
	// ClaimEarly: claim the partitions core.PlanGroup says to wait for
	// (no revoke before assign).
	ClaimEarly bool
	// CommitPastLowWater: commit the processed position uncapped by the
	// reader's lowest unresolved in-doubt offset.
	CommitPastLowWater bool
	// RoundPause: the pause is checked once per round, after the
	// heartbeat, instead of by a timer PauseAfter after the last one.
	RoundPause bool
	// KeepOrphans: a record naming the member that it neither holds nor
	// is assigned stays so (no PlanGroup.Orphans).
	KeepOrphans bool
	// StaleHold: a held partition whose record another member rewrote is
	// fenced only on another owner's name (no GroupView.HeldRevs).
	StaleHold bool
	// ResumeBlind: a paused member resumes as soon as a heartbeat
	// succeeds, without reasserting its records.
	ResumeBlind bool
	// SkipOwnerRead: a member a position record names that is missing
	// from the member listing is not read by key; never seen by this
	// member (its first listing missed it), it counts as dead.
	SkipOwnerRead bool
	// TrustStaleListings: a member listing is observed and planned on
	// however old the state it was answered from: also when it does not
	// show this round's heartbeat (or the round's heartbeat failed), or
	// shows a record older than already seen.
	TrustStaleListings bool
}
