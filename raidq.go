// Package raidq is the Go API of raidq, a leaderless, erasure-coded message
// queue: producers write Reed-Solomon shards of each micro-batch straight
// into write-once slots on a six-node ensemble and are acknowledged at four
// of six, so two dead or slow nodes cost them nothing.
//
//	c, _ := raidq.Connect("nats://127.0.0.1:4222,nats://127.0.0.1:4223")
//	defer c.Close()
//	p, _ := c.Producer("orders", raidq.WithLinger(2*time.Millisecond))
//	pos, err := p.Send(ctx, raidq.Message{Key: []byte("k"), Value: []byte("v")})
//	cons, _ := c.Consumer("orders", raidq.WithStart(start))
//	for {
//		m, err := cons.Next(ctx)
//		...
//	}
//
// Options follow one style: Connect takes Options, Producer takes
// ProducerOptions and Consumer takes ConsumerOptions, each built by a
// With... function. Everything that holds resources has Close() error.
//
// A cluster to run against comes from `raidq dev` (or `raidq node` on
// several hosts); tests and examples start one in process with package
// github.com/raidq/raidq/actors/server (LocalCluster).
package raidq

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// Errors a send or a call can fail with; test with errors.Is.
var (
	// ErrNotEnoughNodes: fewer than W nodes of the ensemble accepted the
	// write on every attempt (more than n-W nodes are down or refusing).
	ErrNotEnoughNodes = core.ErrNotEnoughNodes
	// ErrClockSkew: the nodes kept refusing offsets as too far ahead; the
	// producer's clock is far off theirs.
	ErrClockSkew = core.ErrClockSkew
	// ErrTimeout: no attempt was acknowledged by W nodes in time.
	ErrTimeout = core.ErrTimeout
	// ErrClosed: the producer, consumer or client was closed.
	ErrClosed = core.ErrClosed
	// ErrUnknownTopic: no such topic.
	ErrUnknownTopic = meta.ErrUnknownTopic
	// ErrUnknownPartition: the topic has no such partition.
	ErrUnknownPartition = errors.New("unknown partition")
	// ErrBusy: the producer's queues are full; slow down.
	ErrBusy = actors.ErrBusy
	// ErrInvalidParams: topic parameters break a rule of the coding
	// (docs/design.md, "Parameters").
	ErrInvalidParams = quorum.ErrInvalidParams
	// ErrInvalidMessage: a send was given a message it cannot take (a
	// Partition set on Send: choose one with SendTo; a Time out of range;
	// a limit of the batch format; a batch of no messages or more than a
	// stripe holds, or to a partition out of range).
	ErrInvalidMessage = actors.ErrInvalidMessage
	// ErrPermissionDenied: the cluster refused this user a subject the
	// operation needs (docs/security.md, "Refusals"): a producer's sends
	// to a topic it may not write, a consumer of a topic it may not read
	// or in a group its groups: list lacks, a topic change without the
	// admin role. The error is a *PermissionError naming the user, the
	// subject and what the auth file lacks; it also matches
	// nats.ErrPermissionViolation.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrPending: SendFuture.Result was called before the outcome was known.
	ErrPending = errors.New("send still pending")
)

// Header is one message header.
type Header = stripe.Header

// StripeID identifies the stripe (micro-batch) a message was written in;
// consumers deduplicate on it.
type StripeID = stripe.ID

// Position is where a message stands in its partition: the stripe's offset
// (nanoseconds since the Unix epoch, chosen by the producer's clock) and the
// message's index in the stripe.
type Position struct {
	Offset uint64
	Index  uint32
}

// Less orders positions within a partition.
func (p Position) Less(o Position) bool {
	return p.Offset < o.Offset || (p.Offset == o.Offset && p.Index < o.Index)
}

// Time is the stripe's offset as a time (the producer's clock when it wrote).
func (p Position) Time() time.Time { return time.Unix(0, int64(p.Offset)) }

func (p Position) String() string { return fmt.Sprintf("%d/%d", p.Offset, p.Index) }

func positionOf(p core.Position) Position { return Position{Offset: p.Offset, Index: p.Index} }

func (p Position) core() core.Position { return core.Position{Offset: p.Offset, Index: p.Index} }

// Params are a topic's coding and timing parameters (n, k, W, D, A, F).
type Params = quorum.Params

// DefaultParams are the default latency profile: 4 data + 2 parity
// shards, commit at 4 of 6, accept window and read delay 250ms (records
// reach consumers in about 300ms).
func DefaultParams() Params { return quorum.Default() }

// LowLatencyParams are the low-latency profile: the default coding with
// a 20ms accept window and read delay, so records reach consumers in
// tens of milliseconds, at the cost of more retries at fresh offsets
// when a disk or a producer stalls (never a loss). See docs/design.md,
// "The read frontier".
func LowLatencyParams() Params { return quorum.LowLatency() }

// ProfileParams returns the parameters of a latency profile by name:
// "default" or "low" (`raidq topic create --latency`).
func ProfileParams(name string) (Params, error) { return quorum.Profile(name) }

// Message is one record, as sent and as delivered.
type Message struct {
	Key     []byte
	Value   []byte
	Headers []Header
	// Time is the record's own timestamp, set by its producer, e.g. a
	// Kafka client's CreateTime; zero: none. It travels with the record
	// at nanosecond precision and must lie between the Unix epoch (which
	// reads back as none) and 2262, else the send fails with
	// ErrInvalidMessage. Position.Time() is when it was written.
	Time time.Time

	// Set on delivery and on the result of a send; a send ignores Topic,
	// Position, Stripe and Late, and Send refuses a Partition other than
	// 0 (SendTo chooses the partition).
	Topic     string
	Partition int
	Position  Position
	Stripe    StripeID
	// Late: delivered after messages at higher positions, from an offset
	// the reader could not decode at first (in doubt) and kept watching.
	Late bool

	gen uint64 // which reading of its partition delivered it (groups.go)
}

// record is m as the producer writes it; a Time it cannot carry is
// ErrInvalidMessage.
func (m *Message) record() (stripe.Record, error) {
	r := stripe.Record{Key: m.Key, Value: m.Value, Headers: m.Headers}
	if m.Time.IsZero() {
		return r, nil
	}
	if m.Time.Before(time.Unix(0, 0)) || m.Time.After(time.Unix(0, math.MaxInt64)) {
		return r, fmt.Errorf("%w: Time %v: must lie between the Unix epoch and %v", ErrInvalidMessage,
			m.Time, time.Unix(0, math.MaxInt64).UTC())
	}
	r.Time = m.Time.UnixNano()
	return r, nil
}

// recordMessage is a delivered record as a Message.
func recordMessage(topic string, partition int, rec stripe.Record) Message {
	m := Message{Topic: topic, Partition: partition, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
	if rec.Time != 0 {
		m.Time = time.Unix(0, rec.Time)
	}
	return m
}
