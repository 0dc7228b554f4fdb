package core

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/invariants"
	"github.com/raidq/raidq/stripe/quorum"
)

// WriterConfig holds a producer's write rules for one partition.
type WriterConfig struct {
	Params quorum.Params
	// AttemptTimeout: an attempt that has not reached W by then is
	// abandoned and the stripe retried at a fresh offset (default A/2).
	AttemptTimeout int64
	// MaxAttempts bounds the attempts of one stripe before the send fails
	// (unless DeliveryTimeout is set).
	MaxAttempts int
	// DeliveryTimeout, when > 0, replaces MaxAttempts as the limit, like
	// Kafka's delivery.timeout.ms: a stripe is retried until this long
	// after its first attempt (a stalled machine or a node restart does
	// not fail the send). After MaxAttempts quick retries, each further
	// attempt waits a backoff that doubles from AttemptTimeout up to
	// MaxBackoff, so that a cluster that cannot take writes is not
	// flooded with attempts (each one leaves shards in void slots).
	DeliveryTimeout int64
	// MaxBackoff caps that backoff (default 1s).
	MaxBackoff int64
	// RetrySpan, when > 0 and without a DeliveryTimeout, keeps a stripe
	// retried (with the backoff above) past MaxAttempts until this long
	// after its first attempt (default 2s: 16 attempts of the default
	// profile's 125ms). So a low-latency topic, whose attempts last A/2 =
	// 10ms, rides through the same restarts and stalls as the default one
	// instead of failing after 160ms.
	RetrySpan int64
	// ConflictJitter: after a conflict the next offset is pushed by a
	// random amount below this (ns); in whole cells of the offset grid
	// when the topic has one (conflictJitter).
	ConflictJitter int64
	// Nodes optionally names the ensemble positions in error messages.
	Nodes []string
	// CommittedWait: after a stripe commits, how long the writer keeps
	// listening for the remaining shards' replies, so that a late refusal
	// (SEALED for a shard that arrived after the accept window) still
	// triggers the rewrite (default A + F; 0 = AttemptTimeout).
	CommittedWait int64
}

// DefaultWriterConfig derives the write rules from topic parameters.
func DefaultWriterConfig(p quorum.Params) WriterConfig {
	return WriterConfig{Params: p, AttemptTimeout: int64(p.AcceptWindow / 2), MaxAttempts: 16, ConflictJitter: 1_000_000,
		CommittedWait: int64(p.AcceptWindow + p.FutureBound), RetrySpan: DefaultRetrySpan}
}

// DefaultRetrySpan is WriterConfig.RetrySpan's default: 2s.
const DefaultRetrySpan = int64(2 * time.Second)

// Rand is the random source the writer is given (math/rand/v2 *Rand fits).
type Rand interface{ Int64N(n int64) int64 }

// Send asks the caller to send the shards of stripe ID, encoded for
// Offset, to the ensemble. Attempt numbers replies; every shard goes to
// ensemble[i] (the caller re-targets the encoded shards with
// stripe.Reshard).
type Send struct {
	ID      stripe.ID
	Attempt int
	Offset  uint64
}

// Ack tells the caller that stripe ID is committed at Offset.
type Ack struct {
	ID     stripe.ID
	Offset uint64
}

// Fail tells the caller that stripe ID could not be committed.
type Fail struct {
	ID  stripe.ID
	Err error
}

// Done tells the caller that the writer holds no more state for ID (the
// encoded shards may be released).
type Done struct{ ID stripe.ID }

// WriterOutput is what one call of Writer.Reply or Writer.Tick asks of its
// driver, in the manner of etcd-raft's Ready: typed lists rather than a
// stream of effects. The zero value asks for nothing.
//
// A driver carries the lists out in field order: every Ack, then every
// Fail, then every Send, then every Done. That is the order in which the
// writer decides them for any one stripe (an Ack comes before the same
// stripe's rewrite Send or its Done; a Fail always comes with, and before,
// its Done; a stripe has no Send once it is Done), so a driver that keeps
// per-stripe state sees each stripe's events in the order they happened:
// it may count a Send that follows the stripe's Ack as a rewrite, and free
// the stripe's encoded shards at Done. Between different stripes (one
// Tick decides for several) the lists imply no order beyond this; within a
// list, entries are in the order decided (for Tick, stripes by id).
type WriterOutput struct {
	Acks  []Ack
	Fails []Fail
	Sends []Send
	Done  []Done
}

// Empty says the output asks for nothing.
func (o WriterOutput) Empty() bool {
	return len(o.Acks) == 0 && len(o.Fails) == 0 && len(o.Sends) == 0 && len(o.Done) == 0
}

// add appends p's lists to o's.
func (o *WriterOutput) add(p WriterOutput) {
	o.Acks = append(o.Acks, p.Acks...)
	o.Fails = append(o.Fails, p.Fails...)
	o.Sends = append(o.Sends, p.Sends...)
	o.Done = append(o.Done, p.Done...)
}

// attempt is one try of a stripe at one offset.
type attempt struct {
	offset   uint64
	sent     int64
	replies  []Status // per ensemble position; 0 = pending
	ok, bad  int
	conflict bool
	// refused: a live node answered and said no (any status but OK and
	// NO_REPLY), so the stripe holds fewer shards than the live nodes could.
	refused  bool
	ahead    bool
	timedOut bool
}

func (a *attempt) pending() int { return len(a.replies) - a.ok - a.bad }

// stripeState is one stripe in flight.
type stripeState struct {
	id        stripe.ID
	attempts  []*attempt
	committed bool
	rewrote   bool // a post-commit rewrite after a conflict was issued
	acked     uint64
	first     int64 // when the first attempt was sent
	retryAt   int64 // a backed-off retry is due then (0: none waiting)
}

// Writer is the pure write logic of one producer for one partition
// (docs/design.md#write-path steps 2, 5, 6, 7). It is owned by one producer actor.
type Writer struct {
	cfg  WriterConfig
	last uint64 // highest offset handed out that still binds (see rollBack)
	// committedHi is the highest offset where an attempt reached W.
	committedHi uint64
	skew        []int64 // per ensemble position: node clock minus our clock, 0 = unknown
	known       []bool
	stripes     map[stripe.ID]*stripeState
}

// NewWriter makes a writer for an ensemble of cfg.Params.N nodes.
func NewWriter(cfg WriterConfig) *Writer {
	n := cfg.Params.N
	return &Writer{cfg: cfg, skew: make([]int64, n), known: make([]bool, n), stripes: make(map[stripe.ID]*stripeState)}
}

// InFlight is the number of stripes the writer holds state for.
func (w *Writer) InFlight() int { return len(w.stripes) }

// Skew is the writer's current clock correction (median node clock minus ours).
func (w *Writer) Skew() int64 {
	var xs []int64
	for i, k := range w.known {
		if k {
			xs = append(xs, w.skew[i])
		}
	}
	if len(xs) == 0 {
		return 0
	}
	sort.Slice(xs, func(a, b int) bool { return xs[a] < xs[b] })
	return xs[len(xs)/2]
}

// nextOffset is max(now + skew correction, last + 1) + jitter, rounded up
// to the topic's offset grid (docs/design.md#kafka-offsets), so every
// offset the writer hands out (first attempts, retries, rewrites) is on
// the grid, and each is above the last. The jitter goes on top of the max:
// when last+1 dominates (offsets running ahead of the corrected clock, as
// after a correction downwards), producers racing for one offset would
// otherwise all retry at last+1 and collide again.
func (w *Writer) nextOffset(now, jitter int64) uint64 {
	off := uint64(max(now+w.Skew(), 1))
	if off <= w.last {
		off = w.last + 1
	}
	off = w.cfg.Params.GridUp(off + uint64(max(jitter, 0)))
	w.last = off
	return off
}

// conflictJitter draws the push after a conflict: below ConflictJitter,
// in whole grid cells on a gridded topic (a push within one cell would
// be rounded away, and the racing producers would meet again in the next
// cell), over at least two cells so that it can still separate them.
func (w *Writer) conflictJitter(rnd Rand) int64 {
	if !w.cfg.Params.Gridded() {
		return rnd.Int64N(w.cfg.ConflictJitter)
	}
	g := int64(w.cfg.Params.Grid)
	return rnd.Int64N(max(w.cfg.ConflictJitter/g, 2)) * g
}

// Start begins writing a new stripe and returns its first Send.
func (w *Writer) Start(now int64, id stripe.ID) Send {
	st := &stripeState{id: id, first: now}
	w.stripes[id] = st
	return w.newAttempt(now, st, 0)
}

func (w *Writer) newAttempt(now int64, st *stripeState, jitter int64) Send {
	a := &attempt{offset: w.nextOffset(now, jitter), sent: now, replies: make([]Status, w.cfg.Params.N)}
	st.attempts = append(st.attempts, a)
	return Send{ID: st.id, Attempt: len(st.attempts) - 1, Offset: a.offset}
}

// Reply records node's answer to one shard of an attempt and returns what
// follows. nodeClock (0 = none) updates the skew estimate.
func (w *Writer) Reply(now int64, rnd Rand, id stripe.ID, att, node int, s Status, nodeClock int64) WriterOutput {
	st, ok := w.stripes[id]
	if !ok || att >= len(st.attempts) || node < 0 || node >= w.cfg.Params.N {
		return WriterOutput{} // late reply for a finished stripe
	}
	a := st.attempts[att]
	if a.replies[node] != 0 {
		return WriterOutput{} // duplicate reply
	}
	if nodeClock != 0 {
		w.skew[node], w.known[node] = nodeClock-(a.sent+now)/2, true
	}
	a.replies[node] = s
	switch s {
	case StatusOK:
		a.ok++
		if w.attemptCommitted(a) {
			w.committedHi = max(w.committedHi, a.offset)
		}
	case StatusConflict:
		a.bad++
		a.conflict, a.refused = true, true
	case StatusClockAhead:
		a.bad++
		a.ahead, a.refused = true, true
	case StatusNoReply, StatusClockOff:
		// Like a dead node: a rewrite elsewhere would meet the same
		// answer, so this is no refusal that a rewrite could mend.
		a.bad++
	default:
		a.bad++
		a.refused = true
	}
	// One reply per ensemble position: acks (and answers) never exceed n.
	// The ack side, progress, asserts it again for the attempt it acks.
	if invariants.Enabled && (a.ok+a.bad > len(a.replies) || len(a.replies) != w.cfg.Params.N) {
		invariants.Failf("writer: stripe %s attempt %d counts %d ok + %d other answers from %d positions (n=%d)",
			id, att, a.ok, a.bad, len(a.replies), w.cfg.Params.N)
	}
	return w.progress(now, rnd, st)
}

// Tick abandons attempts past their timeout and returns what follows: an
// uncommitted stripe is retried (or failed); a committed one stops waiting
// for its remaining replies and is forgotten (Done).
func (w *Writer) Tick(now int64, rnd Rand) WriterOutput {
	var out WriterOutput
	for _, st := range w.sortedStripes() {
		if st.retryAt > 0 && now >= st.retryAt {
			out.add(w.progress(now, rnd, st))
			continue
		}
		last := st.attempts[len(st.attempts)-1]
		timeout := w.cfg.AttemptTimeout
		if st.committed && !st.rewrote && w.cfg.CommittedWait > timeout {
			timeout = w.cfg.CommittedWait
		}
		if !last.timedOut && now-last.sent >= timeout {
			last.timedOut = true
			out.add(w.progress(now, rnd, st))
		}
	}
	return out
}

func (w *Writer) attemptCommitted(a *attempt) bool { return w.cfg.Params.Committed(a.ok) }

// sortedStripes gives a deterministic iteration order (for the simulation).
func (w *Writer) sortedStripes() []*stripeState {
	out := make([]*stripeState, 0, len(w.stripes))
	for _, st := range w.stripes {
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].id, out[j].id
		if a.Producer != b.Producer {
			return string(a.Producer[:]) < string(b.Producer[:])
		}
		return a.Seq < b.Seq
	})
	return out
}

// progress decides, after any change to st, whether to ack, retry,
// rewrite, fail or forget it. (Its decisions for st come in the order
// WriterOutput documents: Ack, then Fail, then Send, then Done.)
func (w *Writer) progress(now int64, rnd Rand, st *stripeState) WriterOutput {
	p := w.cfg.Params
	var out WriterOutput
	if !st.committed {
		for _, a := range st.attempts {
			if p.Committed(a.ok) {
				if invariants.Enabled {
					w.checkAck(st, a)
				}
				st.committed, st.acked = true, a.offset
				out.Acks = append(out.Acks, Ack{ID: st.id, Offset: a.offset})
				break
			}
		}
	}
	last := st.attempts[len(st.attempts)-1]
	if st.committed {
		// A retry waiting out its backoff is moot once an older attempt
		// commits; left set, Tick would never time the last attempt out
		// (the stripe stuck in flight for good).
		st.retryAt = 0
		// docs/design.md#write-path step 7: a committed stripe that met a conflict has less
		// redundancy than the others; write it once more elsewhere. The
		// same holds for any refusal by a live node (SEALED after a late
		// arrival, BUSY, a store error): with W = k such a stripe may have
		// exactly k shards, and losing one of them before repair loses it.
		if w.committingAttempt(st).refused && !st.rewrote {
			st.rewrote = true
			out.Sends = append(out.Sends, w.newAttempt(now, st, 0))
			return out
		}
		if w.settled(st) {
			delete(w.stripes, st.id)
			out.Done = append(out.Done, Done{ID: st.id})
		}
		return out
	}
	if p.CanStillCommit(last.ok, last.pending()) && !last.timedOut {
		return out
	}
	if w.givenUp(now, st) {
		if w.anyOpen(st) {
			return out // an older attempt may still commit; wait for it or its timeout
		}
		delete(w.stripes, st.id)
		out.Fails = append(out.Fails, Fail{ID: st.id, Err: w.failure(st)})
		out.Done = append(out.Done, Done{ID: st.id})
		return out
	}
	if wait := w.backoff(st); wait > 0 {
		switch {
		case st.retryAt == 0:
			st.retryAt = now + wait
			return out
		case now < st.retryAt:
			return out
		}
		st.retryAt = 0
	}
	var jitter int64
	if last.conflict && w.cfg.ConflictJitter > 0 {
		jitter = w.conflictJitter(rnd)
	}
	if last.ahead {
		w.rollBack(now)
	}
	out.Sends = append(out.Sends, w.newAttempt(now, st, jitter))
	return out
}

// rollBack lowers last after an attempt died of CLOCK_AHEAD. Offsets in
// the refused future (beyond the nodes' now+F by the current skew
// estimate) can't commit, so they bind nothing. Without this, last+1
// would pin every retry (and every later stripe) to the refused future until
// real time caught up, and the skew learned from the refusals would be
// useless. last stays at or above every committed offset and every other
// attempt within the horizon, so commits keep their order; and it stays
// on the grid, being one of those offsets (or 0).
func (w *Writer) rollBack(now int64) {
	horizon := uint64(max(now+w.Skew()+int64(w.cfg.Params.FutureBound), 0))
	floor := w.committedHi
	for _, st := range w.stripes {
		for _, a := range st.attempts {
			if a.offset <= horizon {
				floor = max(floor, a.offset)
			}
		}
	}
	w.last = min(w.last, floor)
}

// committingAttempt is the attempt whose offset was acked.
func (w *Writer) committingAttempt(st *stripeState) *attempt {
	if invariants.Enabled {
		w.checkAcked(st)
	}
	for _, a := range st.attempts {
		if a.offset == st.acked {
			return a
		}
	}
	return st.attempts[0]
}

// checkAck asserts, as the writer acks st at attempt a, what the ack
// rests on: W oks counted at a's offset, at most n (one per position:
// Reply asserts it as it counts), committedHi covering the offset
// (rollBack keeps later offsets above it).
func (w *Writer) checkAck(st *stripeState, a *attempt) {
	p := w.cfg.Params
	switch {
	case a.ok > p.N || a.ok+a.bad > len(a.replies):
		invariants.Failf("writer: stripe %s acked at offset %d with %d oks + %d other answers, n=%d", st.id, a.offset, a.ok, a.bad, p.N)
	case a.ok != countStatus(a.replies, StatusOK):
		invariants.Failf("writer: stripe %s acked at offset %d with %d oks counted, %d recorded", st.id, a.offset, a.ok, countStatus(a.replies, StatusOK))
	case a.offset > w.committedHi:
		invariants.Failf("writer: stripe %s acked at offset %d above the highest committed offset %d", st.id, a.offset, w.committedHi)
	}
}

// checkAcked asserts the other side of checkAck for a committed stripe:
// its acked offset is that of one of its attempts, which reached W.
func (w *Writer) checkAcked(st *stripeState) {
	for _, a := range st.attempts {
		if a.offset == st.acked && w.attemptCommitted(a) {
			return
		}
	}
	invariants.Failf("writer: stripe %s (committed=%v) acked at offset %d, where none of its %d attempts reached W=%d",
		st.id, st.committed, st.acked, len(st.attempts), w.cfg.Params.W)
}

func countStatus(replies []Status, s Status) int {
	n := 0
	for _, r := range replies {
		if r == s {
			n++
		}
	}
	return n
}

// settled: nothing more can change what the writer does for a committed
// stripe. Without a rewrite, the committing attempt must have every reply
// or be past its deadline, because a late CONFLICT still calls for the
// §3.7 rewrite ("the other shards keep going until their deadline"). With
// a rewrite, the rewrite must have committed, failed or timed out.
func (w *Writer) settled(st *stripeState) bool {
	last := st.attempts[len(st.attempts)-1]
	if !st.rewrote {
		c := w.committingAttempt(st)
		return c.pending() == 0 || c.timedOut
	}
	return last.pending() == 0 || last.timedOut || w.attemptCommitted(last)
}

// givenUp: the stripe has used its attempts, or its delivery timeout.
func (w *Writer) givenUp(now int64, st *stripeState) bool {
	if w.cfg.DeliveryTimeout > 0 {
		return now-st.first >= w.cfg.DeliveryTimeout
	}
	return len(st.attempts) >= w.cfg.MaxAttempts && now-st.first >= w.cfg.RetrySpan
}

// backoff is the wait before the next attempt: none for the first
// MaxAttempts, then (with a DeliveryTimeout or RetrySpan) doubling from
// AttemptTimeout.
func (w *Writer) backoff(st *stripeState) int64 {
	extra := len(st.attempts) - w.cfg.MaxAttempts
	if (w.cfg.DeliveryTimeout <= 0 && w.cfg.RetrySpan <= 0) || extra < 0 {
		return 0
	}
	limit := w.cfg.MaxBackoff
	if limit <= 0 {
		limit = int64(time.Second)
	}
	return min(w.cfg.AttemptTimeout<<min(extra, 16), limit)
}

// anyOpen: some attempt may still reach W (replies pending, not timed out).
func (w *Writer) anyOpen(st *stripeState) bool {
	p := w.cfg.Params
	for _, a := range st.attempts {
		if !a.timedOut && p.CanStillCommit(a.ok, a.pending()) {
			return true
		}
	}
	return false
}

// failure explains why a stripe failed, naming what each node answered last.
func (w *Writer) failure(st *stripeState) error {
	last := st.attempts[len(st.attempts)-1]
	parts := make([]string, len(last.replies))
	ahead := 0
	for i, s := range last.replies {
		name := fmt.Sprintf("position%d", i)
		if i < len(w.cfg.Nodes) {
			name = w.cfg.Nodes[i]
		}
		if s == 0 {
			parts[i] = name + "=pending"
		} else {
			parts[i] = name + "=" + s.String()
		}
	}
	for _, a := range st.attempts {
		if a.ahead {
			ahead++
		}
	}
	why := fmt.Sprintf("stripe %s: %d attempts, none reached %d of %d acks (last: %s)",
		st.id, len(st.attempts), w.cfg.Params.W, w.cfg.Params.N, strings.Join(parts, " "))
	if w.cfg.DeliveryTimeout > 0 {
		why = fmt.Sprintf("delivery timeout %s: %s", time.Duration(w.cfg.DeliveryTimeout), why)
	}
	switch {
	case ahead*2 > len(st.attempts):
		return fmt.Errorf("%w: %s", ErrClockSkew, why)
	case last.ok+last.pending() < w.cfg.Params.W && (!last.timedOut || last.pending() == 0):
		return fmt.Errorf("%w: %s", ErrNotEnoughNodes, why)
	default:
		return fmt.Errorf("%w: %s", ErrTimeout, why)
	}
}
