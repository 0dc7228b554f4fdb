// Package raidq is the Go API of raidq, a leaderless, erasure-coded message
// queue: producers write Reed-Solomon shards of each micro-batch straight
// into write-once slots on a six-node ensemble and are acknowledged at four
// of six, so two dead or slow nodes cost them nothing.
//
//	c, _ := raidq.Connect("nats://127.0.0.1:4222,nats://127.0.0.1:4223")
//	p, _ := c.Producer("orders")
//	pos, err := p.Send(ctx, raidq.Message{Key: []byte("k"), Value: []byte("v")})
//	cons, _ := c.Consumer("orders", raidq.ConsumerOptions{From: start})
//	for m := range cons.Messages() { ... }
package raidq

import (
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
	// ErrBusy: the producer's queues are full; slow down.
	ErrBusy = actors.ErrBusy
	// ErrInvalidParams: topic parameters break a rule of DESIGN §2.
	ErrInvalidParams = quorum.ErrInvalidParams
)

// Header is one message header.
type Header = stripe.Header

// StripeID identifies the stripe (micro-batch) a message was written in;
// consumers deduplicate on it.
type StripeID = stripe.ID

// Position is where a message stands in its partition: the stripe's offset
// (nanoseconds since the Unix epoch, chosen by the producer's clock) and the
// message's index in the stripe.
type Position = core.Position

// Params are a topic's coding and timing parameters (n, k, W, D, A, F).
type Params = quorum.Params

// DefaultParams are 4 data + 2 parity shards, commit at 4 of 6, read 500ms
// behind the clock.
func DefaultParams() Params { return quorum.Default() }

// Message is one record, as sent and as delivered.
type Message struct {
	Key     []byte
	Value   []byte
	Headers []Header

	// Set on delivery (and on the result of a send).
	Topic     string
	Partition int
	Position  Position
	Stripe    StripeID
	// Late: delivered after messages at higher positions, from an offset
	// the reader could not decode at first (in doubt) and kept watching.
	Late bool

	gen uint64 // which reading of its partition delivered it (groups.go)
}

func (m *Message) record() stripe.Record {
	return stripe.Record{Key: m.Key, Value: m.Value, Headers: m.Headers}
}
