package raidq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
)

// What a group member hands the application, what the application is done
// with, and the commits that follow (groups.go has the membership).
//
// The forwarder (Consumer.forward) is the only sender on the application's
// unbuffered channel, so it knows exactly which message the application
// holds: the last one taken. That message is done when the application
// takes the next one, calls Next again, or commits it; done messages move
// their partition's processed position, which AutoCommit commits and a
// release commits before handing the partition over. Without AutoCommit
// only Commit moves it: the application decides what is processed.

// offer hands m to the application unless its partition is given up
// first (it waits while the member is paused). A release stops the
// partition (closes its quit) and then waits while an offer of it is
// pending (g.offered) or its message is in hand, so a message is never
// handed over after its partition's final commit: an offer that marks
// itself pending checks quit under the same lock and gives up if the
// release already started, since that release may have looked already;
// one that marked itself first is waited for, and if its send wins the
// race with quit (a select picks at random), the message taken is in
// hand and the release waits for it too. False: not handed over (or the
// consumer closed).
func (g *groupState) offer(c *Consumer, m Message) bool {
	select {
	case <-g.gate():
	case <-c.quit:
		return false
	}
	part := g.current(m)
	if part == nil {
		return false
	}
	g.hmu.Lock()
	if part.given() && !g.bugs.HandOverRace {
		g.hmu.Unlock()
		return false // released between current and here
	}
	g.offered = part
	g.hmu.Unlock()
	quit := part.quit
	if g.bugs.HandOverRace {
		quit = nil // the bug: the hand-over does not abort when the partition is released
	}
	select {
	case c.ch <- m:
		g.took(part, m)
		return true
	case <-quit:
	case <-c.quit:
	}
	g.hmu.Lock()
	g.offered = nil
	g.signalLocked()
	g.hmu.Unlock()
	return false
}

// given says whether part was given up (stopPart closed its quit).
func (part *groupPart) given() bool {
	select {
	case <-part.quit:
		return true
	default:
		return false
	}
}

// took records that the application took m of part (the previous one is
// done).
func (g *groupState) took(part *groupPart, m Message) {
	g.hmu.Lock()
	defer g.hmu.Unlock()
	if g.inHand != nil && g.auto > 0 {
		g.doneLocked(g.inHand)
	}
	g.offered = nil
	g.inHand = &handoff{part: part, next: core.Position{Offset: m.Position.Offset, Index: m.Position.Index + 1}}
	g.signalLocked()
}

// idle records that the application is done with the message it holds.
func (g *groupState) idle() {
	g.hmu.Lock()
	defer g.hmu.Unlock()
	if g.inHand != nil {
		if g.auto > 0 {
			g.doneLocked(g.inHand)
		}
		g.inHand = nil
		g.signalLocked()
	}
}

func (g *groupState) doneLocked(h *handoff) {
	if h.part.processed.Less(h.next) {
		h.part.processed = h.next // late deliveries (lower positions) never move it back
	}
}

func (g *groupState) signalLocked() {
	close(g.handCh)
	g.handCh = make(chan struct{})
}

func (g *groupState) processedOf(part *groupPart) core.Position {
	g.hmu.Lock()
	defer g.hmu.Unlock()
	return part.processed
}

// waitInHand waits, up to revokeGrace, until the application is done with
// the message of part it holds.
func (g *groupState) waitInHand(part *groupPart) {
	deadline := time.NewTimer(revokeGrace)
	defer deadline.Stop()
	for {
		g.hmu.Lock()
		holding, ch := (g.inHand != nil && g.inHand.part == part) || (g.offered == part && !g.bugs.HandOverRace), g.handCh
		g.hmu.Unlock()
		if !holding {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			return
		case <-g.c.quit:
			return
		}
	}
}

// current is the owned partition reading that delivered m, or nil if the
// partition moved or was re-read (Seek) since.
func (g *groupState) current(m Message) *groupPart {
	g.mu.Lock()
	defer g.mu.Unlock()
	part := g.parts[m.Partition]
	if part == nil || part.gen != m.gen {
		return nil
	}
	return part
}

// gate is closed while the member delivers and open while it is paused.
func (g *groupState) gate() <-chan struct{} {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	return g.resume
}

// pause stops delivery: the member could not heartbeat for long enough
// that the others may soon judge it dead and take its partitions.
func (g *groupState) pause() {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	select {
	case <-g.resume:
		g.resume = make(chan struct{})
		g.c.ports.logger.Warn("consumer group: no heartbeat for most of the session; delivery paused until one succeeds",
			g.logArgs("session", g.session, "pause_after", time.Duration(core.PauseAfter(int64(g.session))))...)
	default:
	}
}

func (g *groupState) paused() bool {
	select {
	case <-g.gate():
		return false
	default:
		return true
	}
}

func (g *groupState) unpause() {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	select {
	case <-g.resume:
	default:
		close(g.resume)
		g.c.ports.logger.Info("consumer group: heartbeat succeeded; delivery resumed", g.logArgs()...)
	}
}

// commitAll commits every owned partition's processed position (AutoCommit).
func (g *groupState) commitAll() {
	g.mu.Lock()
	parts := make([]*groupPart, 0, len(g.parts))
	for _, part := range g.parts {
		parts = append(parts, part)
	}
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(g.base, 2*GroupInterval)
	defer cancel()
	for _, part := range parts {
		err := g.commit(ctx, part, g.processedOf(part))
		if err != nil && !errors.Is(err, meta.ErrFenced) {
			g.setTrouble("auto-commit failed", err)
			return
		}
	}
}

// commit writes next as part's position unless it would move backwards,
// capped at the reader's lowest unresolved in-doubt offset. Fenced, the
// partition is dropped.
func (g *groupState) commit(ctx context.Context, part *groupPart, next core.Position) error {
	part.mu.Lock()
	next = g.safe(part, next)
	if !part.committed.Less(next) && !part.seeked {
		part.mu.Unlock()
		return nil
	}
	rev, err := g.writePosition(ctx, part,
		meta.GroupPosition{Offset: next.Offset, Index: next.Index, Member: g.member, Updated: time.Now().UnixNano()})
	if err == nil {
		part.rev, part.committed, part.seeked = rev, next, false
	}
	part.mu.Unlock()
	if errors.Is(err, meta.ErrFenced) {
		g.drop(part)
		return fmt.Errorf("consumer group %s member %s: partition %d was taken over by another member, its reader is stopped here: %w",
			g.group, g.member, part.p, err)
	}
	return err
}

// writePosition compare-and-sets part's record (part.mu held). A write
// whose answer was lost (a timeout while the KV leader moved) may have
// landed: the record moved on but still names this member. That is not
// fencing: take the record's revision and write again.
func (g *groupState) writePosition(ctx context.Context, part *groupPart, rec meta.GroupPosition) (uint64, error) {
	rev, err := g.store.CommitPosition(ctx, g.group, g.c.topic, part.p, rec, part.rev)
	if !errors.Is(err, meta.ErrFenced) {
		return rev, err
	}
	cur, crev, rerr := g.store.Position(ctx, g.group, g.c.topic, part.p)
	if rerr != nil || cur.Member != g.member || crev == 0 {
		return rev, err
	}
	part.rev = crev
	return g.store.CommitPosition(ctx, g.group, g.c.topic, part.p, rec, part.rev)
}

// Commit records that m and everything before it in its partition are
// processed: the group resumes after m when the partition moves to another
// member. It never moves a partition's position backwards (committing an
// older message is a no-op), except after Seek, and never past an offset
// the partition's reader still holds in doubt (the position stays there
// until it is resolved). If the partition was taken over by another
// member, the commit fails with an error wrapping ErrFenced and this
// member stops reading the partition; the new owner redelivers what was
// not committed (at-least-once).
func (c *Consumer) Commit(ctx context.Context, m Message) error {
	g := c.group
	if g == nil {
		return errors.New("raidq: Commit needs a consumer group (consumerConfig.Group)")
	}
	if m.Topic != c.topic || m.gen == 0 {
		return fmt.Errorf("raidq: Commit of a message this consumer did not deliver (topic %q, partition %d)", m.Topic, m.Partition)
	}
	g.mu.Lock()
	part := g.parts[m.Partition]
	g.mu.Unlock()
	if part == nil || m.gen < part.claimGen {
		return fmt.Errorf("consumer group %s member %s: partition %d is no longer this member's (rebalanced): %w",
			g.group, g.member, m.Partition, meta.ErrFenced)
	}
	if m.gen < part.gen {
		return fmt.Errorf("consumer group %s partition %d: %w", g.group, m.Partition, ErrSeeked)
	}
	next := core.Position{Offset: m.Position.Offset, Index: m.Position.Index + 1}
	g.hmu.Lock()
	if m.gen == part.gen {
		g.doneLocked(&handoff{part: part, next: next})
		if g.inHand != nil && g.inHand.part == part && !next.Less(g.inHand.next) {
			g.inHand = nil
			g.signalLocked()
		}
	}
	g.hmu.Unlock()
	return g.commit(ctx, part, next)
}

// seek restarts every owned partition's reader at t; the next commits may
// move positions backwards. Partitions claimed later start from the
// group's committed positions.
func (g *groupState) seek(t time.Time) error {
	g.mu.Lock()
	parts := make([]*groupPart, 0, len(g.parts))
	for _, part := range g.parts {
		parts = append(parts, part)
	}
	g.mu.Unlock()
	var errs []error
	at := core.Position{Offset: uint64(t.UnixNano())}
	for _, old := range parts {
		g.stopPart(old)
		old.mu.Lock()
		part := &groupPart{p: old.p, claimGen: old.claimGen, gen: gens.Add(1), quit: make(chan struct{}),
			rev: old.rev, committed: old.committed, seeked: true, processed: at}
		old.mu.Unlock()
		if err := g.startReader(part, at); err != nil {
			errs = append(errs, err)
			g.mu.Lock()
			if g.parts[old.p] == old {
				delete(g.parts, old.p)
			}
			g.mu.Unlock()
			continue
		}
		g.mu.Lock()
		if g.parts[old.p] == old && !g.stopped {
			g.parts[old.p] = part
			g.mu.Unlock()
			continue
		}
		g.mu.Unlock()
		g.stopPart(part) // dropped meanwhile
	}
	return errors.Join(errs...)
}
