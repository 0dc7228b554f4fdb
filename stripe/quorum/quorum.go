// Package quorum holds raidq's quorum arithmetic (docs/design.md#the-arithmetic): the parameter
// rules that bind n, k, W and the read/write verdicts that follow from them.
// It is pure and tiny on purpose so that it can be checked exhaustively
// against the naive versions in quick_test.go.
package quorum

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidParams is wrapped by every parameter validation error.
var ErrInvalidParams = errors.New("invalid topic parameters")

// Limits on the shape of an ensemble. Reed-Solomon over GF(2^8) allows up to
// 256 shards; we keep ensembles small because every write fans out to all n.
const (
	MaxShards = 32
	MinShards = 2
)

// Params are a topic's coding and timing parameters.
type Params struct {
	N int // shards per stripe = nodes per ensemble
	K int // data shards
	W int // write quorum: acks that commit a stripe

	ReadDelay    time.Duration // D: readers stay this far behind the clock
	AcceptWindow time.Duration // A: nodes refuse offsets older than now-A
	FutureBound  time.Duration // F: nodes refuse offsets newer than now+F
	MaxSkew      time.Duration // clock skew the operator budgets for (D >= A + MaxSkew)

	// Grid is the offset grid in nanoseconds (docs/design.md#kafka-offsets):
	// a power of two; stripe offsets are multiples of it and a stripe
	// holds at most Grid records, so offset + record index is an int64
	// that grows in delivery order (the Kafka offset). 0 or 1: no grid
	// (topics created before it; not served to Kafka clients).
	Grid uint64
}

// DefaultGrid is the offset grid of new topics: 1024 ns, so at most 1024
// records per stripe.
const DefaultGrid = 1024

// MaxGrid bounds the grid (65536 ns = stripe.MaxRecords records).
const MaxGrid = 1 << 16

// Gridded says whether offsets follow a grid (Grid > 1).
func (p Params) Gridded() bool { return p.Grid > 1 }

// OnGrid says whether offset is a multiple of the grid (always true
// without one).
func (p Params) OnGrid(offset uint64) bool { return !p.Gridded() || offset&(p.Grid-1) == 0 }

// GridUp rounds offset up to the next multiple of the grid (itself if on it).
func (p Params) GridUp(offset uint64) uint64 {
	if !p.Gridded() {
		return offset
	}
	return (offset + p.Grid - 1) &^ (p.Grid - 1)
}

// MaxStripeRecords is how many records one stripe may hold: the grid, or
// limit without one.
func (p Params) MaxStripeRecords(limit int) int {
	if p.Gridded() {
		return min(int(p.Grid), limit)
	}
	return limit
}

// Default returns the default profile: 4 data + 2 parity, commit at 4 of
// 6, A=250ms, D=250ms, F=250ms, budgeting 250ms of clock skew. Readers
// deliver about A behind the nodes' clocks (the read frontier,
// docs/design.md#the-read-frontier), so records reach consumers in about
// 300ms; producers retry a stripe at a fresh offset only after A/2 (125ms)
// without W acks, which rides through GC pauses and slow disks.
func Default() Params {
	return Params{N: 6, K: 4, W: 4,
		ReadDelay: 250 * time.Millisecond, AcceptWindow: 250 * time.Millisecond,
		FutureBound: 250 * time.Millisecond, MaxSkew: 250 * time.Millisecond, Grid: DefaultGrid}
}

// LowLatency returns the low-latency profile (`topic create --latency
// low`): the default's coding with A=D=LowLatencyWindow. Records reach
// consumers in tens of milliseconds; the cost is that a write attempt
// gets only A/2 to reach W before it is retried at a fresh offset, so a
// stalled disk or a paused producer causes more retries (never a loss),
// and node clocks must agree to well within A (the clock watch's
// budget still applies).
func LowLatency() Params {
	p := Default()
	p.AcceptWindow, p.ReadDelay = LowLatencyWindow, LowLatencyWindow
	return p
}

// LowLatencyWindow is the low-latency profile's accept window A and read
// delay D.
const LowLatencyWindow = 20 * time.Millisecond

// Profiles names the latency profiles `topic create --latency` takes.
var Profiles = []string{"default", "low"}

// Profile returns the parameters of the named latency profile.
func Profile(name string) (Params, error) {
	switch name {
	case "", "default":
		return Default(), nil
	case "low":
		return LowLatency(), nil
	}
	return Params{}, fmt.Errorf("%w: latency profile %q: want one of %v", ErrInvalidParams, name, Profiles)
}

// M is the number of parity shards.
func (p Params) M() int { return p.N - p.K }

// Validate checks every rule of docs/design.md#the-arithmetic and says which one failed.
func (p Params) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidParams}, a...)...)
	}
	switch {
	case p.N < MinShards || p.N > MaxShards:
		return bad("n=%d shards: must be between %d and %d", p.N, MinShards, MaxShards)
	case p.K < 1 || p.K >= p.N:
		return bad("k=%d data shards with n=%d: need 1 <= k < n (at least one parity shard)", p.K, p.N)
	case 2*p.W <= p.N:
		return bad("W=%d with n=%d: W must be > n/2 so two racing stripes cannot both commit one offset", p.W, p.N)
	case p.W < p.K:
		return bad("W=%d with k=%d: W must be >= k so a committed stripe is decodable", p.W, p.K)
	case p.W > p.N:
		return bad("W=%d with n=%d: W cannot exceed n", p.W, p.N)
	case p.AcceptWindow <= 0 || p.FutureBound <= 0:
		return bad("accept window %v and future bound %v must be positive", p.AcceptWindow, p.FutureBound)
	case p.MaxSkew < 0:
		return bad("max skew %v must not be negative", p.MaxSkew)
	case p.Grid > MaxGrid || p.Grid&(p.Grid-1) != 0:
		return bad("offset grid %d ns: must be a power of two up to %d (0: none)", p.Grid, MaxGrid)
	case p.ReadDelay < p.AcceptWindow:
		return bad("read delay %v must be >= accept window %v: readers propose scans D behind their clock and nodes close offsets only A behind theirs",
			p.ReadDelay, p.AcceptWindow)
	}
	return nil
}

// WriteTolerance is how many nodes may be dead or slow without the producer
// noticing: n - W.
func (p Params) WriteTolerance() int { return p.N - p.W }

// Committed reports whether ok acknowledgements commit a stripe.
func (p Params) Committed(ok int) bool { return ok >= p.W }

// CanStillCommit reports whether a stripe with ok acknowledgements and
// pending outstanding requests can still reach W.
func (p Params) CanStillCommit(ok, pending int) bool { return ok+pending >= p.W }

// Decodable reports whether shards distinct shards of a stripe suffice to decode it.
func (p Params) Decodable(shards int) bool { return shards >= p.K }

// Verdict is a reader's judgement of one stripe group at one offset.
type Verdict int

const (
	// Deliver: enough shards to decode.
	Deliver Verdict = iota
	// Void: the group cannot have reached W even if every unheard node held
	// a shard of it, so it was never committed.
	Void
	// InDoubt: the group might have been committed but cannot be decoded
	// from what was heard.
	InDoubt
)

func (v Verdict) String() string {
	switch v {
	case Deliver:
		return "deliver"
	case Void:
		return "void"
	case InDoubt:
		return "in-doubt"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Judge classifies a group of seen shards of one stripe at one offset, given
// how many nodes of the ensemble were not heard from (docs/design.md#read-path).
func (p Params) Judge(seen, unheard int) Verdict {
	switch {
	case seen >= p.K:
		return Deliver
	case seen+unheard < p.W:
		return Void
	default:
		return InDoubt
	}
}

// CertainRead reports whether a reader that heard r nodes can always tell a
// committed partial stripe from an uncommitted one (n - r <= W - k).
func (p Params) CertainRead(heard int) bool { return p.N-heard <= p.W-p.K }
