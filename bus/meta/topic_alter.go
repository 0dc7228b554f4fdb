package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/stripe/quorum"
)

// Errors of `topic alter` and `topic add-partitions`.
var (
	// ErrAlterPending: a change of the accept window is still taking
	// effect; the next one must wait until it is in force everywhere.
	ErrAlterPending = errors.New("a change of the accept window is still taking effect")
	// ErrAlterOrder: the change would leave the read delay below an accept
	// window still in force on some node.
	ErrAlterOrder = errors.New("change out of order")
	// ErrAlter: the change is not allowed (a field fixed at creation, fewer
	// partitions, nothing to change).
	ErrAlter = errors.New("cannot alter topic")
)

// AlterLead is how far ahead of a change of the accept window the new
// window starts (quorum.AlterLead, in ns).
const AlterLead = quorum.AlterLead

// TopicChange is what `topic alter` asks for; nil fields stay as they are.
type TopicChange struct {
	Retention      *time.Duration
	RetentionBytes *int64
	ReadDelay      *time.Duration
	AcceptWindow   *time.Duration
}

// Empty reports whether the change changes nothing.
func (c TopicChange) Empty() bool {
	return c.Retention == nil && c.RetentionBytes == nil && c.ReadDelay == nil && c.AcceptWindow == nil
}

// PlanAlter returns cur changed by c at time now, validated by the same
// arithmetic as creation (docs/design.md#changing-a-topics-timing).
// Retention changes freely. The accept window changes by offset
// (quorum.PlanAccept: AlterLead ahead, so every node switches at the same
// range), one change at a time, and the read delay must cover every
// window in force, so D never falls below an A any node still uses:
// lowering both takes two changes, A first, D once A is in force
// (ErrAlterOrder says when).
func PlanAlter(cur TopicRecord, c TopicChange, now time.Time) (TopicRecord, error) {
	if c.Empty() {
		return cur, fmt.Errorf("%w %q: nothing to change (give --retention, --retention-bytes, --read-delay, --accept-window or --latency)", ErrAlter, cur.Name)
	}
	r := cur
	r.Ensembles = cloneEnsembles(cur.Ensembles)
	if c.Retention != nil {
		r.Retention = Duration(*c.Retention)
	}
	if c.RetentionBytes != nil {
		r.RetentionBytes = *c.RetentionBytes
	}
	if err := planAccept(&r, cur, c, now); err != nil {
		return cur, err
	}
	if c.ReadDelay != nil {
		r.ReadDelay = Duration(*c.ReadDelay)
	}
	if err := r.Params().Validate(); err != nil {
		return cur, err
	}
	if plan := r.AcceptPlan(); time.Duration(r.ReadDelay) < time.Duration(plan.Max()) {
		return cur, fmt.Errorf("%w: read delay %v is below the accept window %v that nodes use for offsets before %s: "+
			"lower the accept window first, then the read delay after %s (`raidq topic alter --latency` does both)",
			ErrAlterOrder, time.Duration(r.ReadDelay), time.Duration(plan.Max()), offsetTime(plan.From), settleTime(plan, r))
	}
	return r, r.Validate()
}

// planAccept applies c's accept window to r: a new plan when it changes
// (refused while the last is still taking effect), and the settled plan
// dropped otherwise.
func planAccept(r *TopicRecord, cur TopicRecord, c TopicChange, now time.Time) error {
	plan := cur.AcceptPlan()
	settled := plan.Settled(now.UnixNano(), int64(cur.MaxSkew))
	if c.AcceptWindow == nil || *c.AcceptWindow == time.Duration(cur.AcceptWindow) {
		if settled {
			r.PrevAcceptWindow, r.AcceptFrom = 0, 0
		}
		return nil
	}
	if !settled {
		return fmt.Errorf("%w: accept window %v until offsets reach %s, in force everywhere after %s; alter it again after that",
			ErrAlterPending, time.Duration(plan.Prev), offsetTime(plan.From), settleTime(plan, cur))
	}
	if *c.AcceptWindow <= 0 {
		return fmt.Errorf("%w: accept window %v must be positive", quorum.ErrInvalidParams, *c.AcceptWindow)
	}
	next := quorum.PlanAccept(int64(cur.AcceptWindow), int64(*c.AcceptWindow), now.UnixNano())
	r.AcceptWindow, r.PrevAcceptWindow, r.AcceptFrom = Duration(next.Next), Duration(next.Prev), next.From
	return nil
}

// SettleTime is when r's pending change of the accept window is in force
// on every node (zero time: none pending).
func SettleTime(r TopicRecord) time.Time {
	plan := r.AcceptPlan()
	if plan.From == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(plan.From)+plan.Max()+int64(r.MaxSkew)+1)
}

func settleTime(plan quorum.AcceptPlan, r TopicRecord) string {
	if plan.From == 0 {
		return "now"
	}
	return SettleTime(r).UTC().Format(time.RFC3339Nano)
}

func offsetTime(off uint64) string { return time.Unix(0, int64(off)).UTC().Format(time.RFC3339) }

func cloneEnsembles(e [][]string) [][]string {
	out := make([][]string, len(e))
	for i, x := range e {
		out[i] = append([]string(nil), x...)
	}
	return out
}

// AlterTopic changes a topic's record by compare-and-set on its revision:
// a concurrent change is re-read and the change planned again against it.
func (s *Store) AlterTopic(ctx context.Context, name string, c TopicChange, now func() time.Time) (TopicRecord, error) {
	return s.updateTopic(ctx, name, func(cur TopicRecord) (TopicRecord, error) { return PlanAlter(cur, c, now()) })
}

// AddPartitions raises a topic's partition count to count. Existing
// partitions keep their ensembles; new ones are drawn from the live members
// as at creation.
func (s *Store) AddPartitions(ctx context.Context, name string, count int, now time.Time) (TopicRecord, error) {
	live, err := s.liveMembers(ctx, now)
	if err != nil {
		return TopicRecord{}, err
	}
	return s.updateTopic(ctx, name, func(cur TopicRecord) (TopicRecord, error) { return PlanPartitions(cur, count, live) })
}

// PlanPartitions returns cur grown to count partitions, the new ones placed
// on live members.
func PlanPartitions(cur TopicRecord, count int, live []string) (TopicRecord, error) {
	if count <= cur.Partitions {
		return cur, fmt.Errorf("%w %q: --count %d: the topic has %d partitions; partitions can only be added", ErrAlter, cur.Name, count, cur.Partitions)
	}
	if count > MaxPartitions {
		return cur, fmt.Errorf("%w %q: --count %d: at most %d partitions", ErrAlter, cur.Name, count, MaxPartitions)
	}
	ens, err := Ensembles(cur.Name, count, cur.N, live)
	if err != nil {
		return cur, fmt.Errorf("%w (live nodes: %s)", err, strings.Join(live, " "))
	}
	r := cur
	r.Ensembles = append(cloneEnsembles(cur.Ensembles), ens[cur.Partitions:]...)
	r.Partitions = count
	return r, r.Validate()
}

// errUnchanged: an updateTopic function found nothing to change; nothing
// is written.
var errUnchanged = errors.New("topic record unchanged")

// updateTopic rewrites a topic record with fn's result, by compare-and-set,
// retrying a few times when another change lands in between. fn gets a
// copy it may change (ensembles included after cloneEnsembles); an error
// from fn (errUnchanged included) is returned and nothing written.
func (s *Store) updateTopic(ctx context.Context, name string, fn func(TopicRecord) (TopicRecord, error)) (TopicRecord, error) {
	for attempt := 0; attempt < 10; attempt++ {
		cctx, cancel := s.ctx(ctx)
		e, err := s.meta.Get(cctx, "topic."+name)
		cancel()
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return TopicRecord{}, fmt.Errorf("%w %q", ErrUnknownTopic, name)
		}
		if err != nil {
			return TopicRecord{}, err
		}
		cur, err := DecodeTopic(e.Value())
		if err != nil {
			return TopicRecord{}, err
		}
		r, err := fn(cur)
		if err != nil {
			return cur, err
		}
		b, _ := json.Marshal(r)
		cctx, cancel = s.ctx(ctx)
		_, err = s.meta.Update(cctx, "topic."+name, b, e.Revision())
		cancel()
		if err == nil {
			s.opts.Logger.Info("metadata: topic changed", "topic", name, "partitions", r.Partitions,
				"accept_window", time.Duration(r.AcceptWindow), "read_delay", time.Duration(r.ReadDelay))
			return r, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return cur, err
		}
	}
	return TopicRecord{}, fmt.Errorf("%w %q: the record kept changing; try again", ErrFenced, name)
}
