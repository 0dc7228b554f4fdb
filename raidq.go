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
	"fmt"
	"math"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
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

// Params are a topic's coding and timing parameters (n, k, W, D, A, F;
// docs/design.md, "Parameters"). Start from DefaultParams,
// LowLatencyParams or ProfileParams and change fields: CreateTopic checks
// the rules that bind them and fails with ErrInvalidParams naming the one
// broken; ValidateParams checks them without a cluster.
type Params struct {
	N int // shards per stripe = nodes per ensemble
	K int // data shards (N-K parity shards)
	W int // write quorum: acknowledgements that commit a stripe

	ReadDelay    time.Duration // D: readers stay this far behind the clock
	AcceptWindow time.Duration // A: nodes refuse offsets older than now-A
	FutureBound  time.Duration // F: nodes refuse offsets newer than now+F
	MaxSkew      time.Duration // clock skew the operator budgets for (D >= A + MaxSkew)

	// Grid is the offset grid in nanoseconds: a power of two; stripe
	// offsets are multiples of it and a stripe holds at most Grid
	// records, so offset + record index is the Kafka offset. 0 or 1: no
	// grid (topics created before it; not served to Kafka clients).
	Grid uint64
}

// String shows the parameters, e.g. "n=6 k=4 W=4 D=250ms A=250ms F=250ms
// skew=250ms grid=1024".
func (p Params) String() string {
	return fmt.Sprintf("n=%d k=%d W=%d D=%v A=%v F=%v skew=%v grid=%d",
		p.N, p.K, p.W, p.ReadDelay, p.AcceptWindow, p.FutureBound, p.MaxSkew, p.Grid)
}

// quorum is p as the protocol's parameters (stripe/quorum).
func (p Params) quorum() quorum.Params {
	return quorum.Params{N: p.N, K: p.K, W: p.W, ReadDelay: p.ReadDelay, AcceptWindow: p.AcceptWindow,
		FutureBound: p.FutureBound, MaxSkew: p.MaxSkew, Grid: p.Grid}
}

// paramsOf is the protocol's parameters as the API's.
func paramsOf(q quorum.Params) Params {
	return Params{N: q.N, K: q.K, W: q.W, ReadDelay: q.ReadDelay, AcceptWindow: q.AcceptWindow,
		FutureBound: q.FutureBound, MaxSkew: q.MaxSkew, Grid: q.Grid}
}

// ValidateParams checks every rule that binds a topic's parameters
// (docs/design.md, "The arithmetic") and says which one p breaks, in an
// error wrapping ErrInvalidParams; nil if none. CreateTopic applies the
// same check.
func ValidateParams(p Params) error { return p.quorum().Validate() }

// DefaultParams are the default latency profile: 4 data + 2 parity
// shards, commit at 4 of 6, accept window and read delay 250ms (records
// reach consumers in about 300ms).
func DefaultParams() Params { return paramsOf(quorum.Default()) }

// LowLatencyParams are the low-latency profile: the default coding with
// a 20ms accept window and read delay, so records reach consumers in
// tens of milliseconds, at the cost of more retries at fresh offsets
// when a disk or a producer stalls (never a loss). See docs/design.md,
// "The read frontier".
func LowLatencyParams() Params { return paramsOf(quorum.LowLatency()) }

// ProfileParams returns the parameters of a latency profile by name:
// "default" or "low" (`raidq topic create --latency`).
func ProfileParams(name string) (Params, error) {
	q, err := quorum.Profile(name)
	return paramsOf(q), err
}

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
