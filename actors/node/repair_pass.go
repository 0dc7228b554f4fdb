package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// marksEvery is how many ranges a walk goes between saving its marks.
const marksEvery = 256

// repairPass is one pass of the repair loop over every partition where
// this node is in the ensemble, after the queued targets; true when it
// ran to its end (not skipped, stopped or cancelled).
func (m *maintenance) repairPass(ctx context.Context) bool {
	if m.io.ClockOff() {
		return false // its repair horizon would mark ranges of the future verified (clock_watch.go)
	}
	start := time.Now()
	m.belowN.Store(0)
	m.undone.Store(0)
	m.repairTargets(ctx)
	for _, t := range m.topics() {
		for p := range t.Partitions {
			pos := t.Position(uint32(p), m.id)
			if pos < 0 {
				continue
			}
			if m.io.ClockOff() {
				return false // found off during the pass: stop before the next partition's horizon
			}
			if err := m.repairPartition(ctx, t, uint32(p), pos); err != nil && ctx.Err() == nil {
				m.log.Warn("repair: partition pass failed", "topic", t.Name, "partition", p, "err", err)
			}
			if ctx.Err() != nil {
				return false
			}
		}
	}
	m.stats.RepairPasses.Add(1)
	m.stats.RepairPassNanos.Store(int64(time.Since(start)))
	m.stats.StripesBelowN.Store(m.belowN.Load())
	m.mu.Lock()
	corrupt, inDoubt := 0, 0
	for _, tg := range m.targets {
		if tg.corrupt {
			corrupt++
		} else {
			inDoubt++
		}
	}
	m.mu.Unlock()
	m.stats.RepairPending.Store(m.undone.Load() + int64(corrupt))
	m.stats.InDoubtQueued.Store(int64(inDoubt))
	return true
}

// repairConfig is the core's view of one partition on this node.
func (m *maintenance) repairConfig(t *meta.Topic, pos int) core.RepairConfig {
	return core.RepairConfig{Params: t.Params, Pos: pos, Birth: t.BirthFor(m.io.Birth())}
}

// repairPartition walks what core.RepairSpans says for one partition.
func (m *maintenance) repairPartition(ctx context.Context, t *meta.Topic, p uint32, pos int) error {
	pr, err := m.part(t.Name, p)
	if err != nil {
		return err
	}
	now := m.io.Now()
	rc := m.repairConfig(t, pos)
	pr.mu.Lock()
	sc := core.SpanConfig{Created: t.Created, Birth: rc.Birth, Repaired: pr.repaired, Verified: pr.verified, Floor: pr.dropped,
		Window: int64(m.cfg.Window), CatchUp: int64(m.cfg.CatchUp), Horizon: int64(t.Params.ReadDelay + m.cfg.Margin)}
	pr.mu.Unlock()
	if t.Retention > 0 {
		sc.Floor = max(sc.Floor, uint64(max(now-int64(t.Retention), 0)))
	}
	for _, sp := range core.RepairSpans(now, sc) {
		if err := m.walk(ctx, t, p, rc, pr, sp); err != nil {
			return err
		}
	}
	// A young incarnation whose past is not yet refilled up to its birth
	// (the walk stops at the horizon) still has work to do.
	pr.mu.Lock()
	if rc.Birth > 0 && max(pr.repaired, sc.Floor, t.Created) < rc.Birth {
		m.undone.Add(1)
	}
	pr.mu.Unlock()
	return nil
}

// walk goes through one span range by range (core.RepairWalk decides
// which ranges and what is done): scan the peers' headers and the own
// slots, plan, fix, and save the walk's mark and holes when it says so. A
// gap walk raises the repaired mark (and records holes) over its done
// prefix; a window walk raises the verified mark over its done prefix.
func (m *maintenance) walk(ctx context.Context, t *meta.Topic, p uint32, rc core.RepairConfig, pr *partRepair, sp core.Span) error {
	set := &pr.winDone
	if sp.Gap {
		set = &pr.gapDone
	}
	w := core.NewRepairWalk(sp, set)
	dead := make(map[string]bool) // peers that timed out in this walk: unheard for the rest of it
	for ctx.Err() == nil {
		m.targetsBetweenRanges(ctx)
		cur, to, ok := w.Next()
		if !ok {
			break
		}
		peers := m.scanPeers(ctx, t, p, rc.Pos, cur, to, true, dead)
		if !sp.Gap && core.BeyondHorizon(to, peers, int64(t.Params.ReadDelay+m.cfg.Margin)) {
			m.log.Info("repair: the pass reached past cluster time (this node's clock is ahead of its peers'); the rest waits for a later pass",
				"topic", t.Name, "partition", p, "at", cur)
			break
		}
		local, err := m.localEntries(t.Name, p, cur, to)
		if err != nil {
			return err
		}
		if m.cfg.Bugs.NoLocal {
			local = nil
		}
		plan := core.PlanRange(rc, cur, to, local, peers, true)
		m.account(t, p, plan)
		var fixed bool
		if m.cfg.Bugs.SkipFix {
			fixed = true
		} else {
			fixed = m.applyFixes(ctx, t, p, rc, plan.Fixes, m.prefetch(ctx, t, p, plan.Fixes))
		}
		if ctx.Err() != nil {
			break // cancelled: neither done nor undone
		}
		before := w.Undone()
		save := w.Settle(plan, fixed)
		if w.Undone() > before {
			m.undone.Add(1)
		}
		if save {
			if err := m.saveMarks(ctx, t.Name, p, pr, sp, w.Mark(), w.TakeHoles()); err != nil {
				return err
			}
		}
	}
	return m.saveMarks(ctx, t.Name, p, pr, sp, w.Mark(), w.TakeHoles())
}

// saveMarks makes the holes and the walk's mark durable, then shows them
// to the slot owners (the mark rises only after every repair write below it
// was acknowledged, i.e. is durable).
func (m *maintenance) saveMarks(ctx context.Context, topic string, p uint32, pr *partRepair, sp core.Span, mark uint64, holes []uint64) error {
	kind := slotstore.MarkVerified
	pr.mu.Lock()
	old := pr.verified
	if sp.Gap {
		kind, old = slotstore.MarkRepaired, pr.repaired
	}
	pr.mu.Unlock()
	if mark <= old && len(holes) == 0 {
		return nil
	}
	raise := uint64(0)
	if mark > old {
		raise = mark
	}
	if err := m.io.SaveMarks(ctx, topic, p, kind, raise, holes); err != nil {
		return err
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if len(holes) > 0 {
		merged := slices.Concat(pr.holes, holes)
		slices.Sort(merged)
		merged = slices.Compact(merged)
		m.stats.Holes.Add(int64(len(merged) - len(pr.holes)))
		for _, h := range holes {
			m.log.Error("repair: offset left unknown for good: it may have held a committed shard of this node, "+
				"and the other nodes cannot rebuild its stripe", "topic", topic, "partition", p, "offset", h)
		}
		pr.holes = merged
	}
	if sp.Gap {
		if mark > pr.repaired {
			pr.repaired = mark
			if mark >= sp.To {
				m.log.Info("repair: refilled the time before this incarnation's birth", "topic", topic, "partition", p, "up_to", mark)
			}
		}
	} else {
		pr.verified = max(pr.verified, mark)
	}
	return nil
}

// commitWait commits b to the node's store and waits until it is durable
// (nodePorts.SaveMarks, retention).
func (m *maintenance) commitWait(ctx context.Context, b *slotstore.Batch) error {
	done := make(chan error, 1)
	m.n.cfg.Store.Commit(b, func(err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// account counts and logs what a plan found.
func (m *maintenance) account(t *meta.Topic, p uint32, plan core.RangePlan) {
	m.belowN.Add(int64(plan.BelowN))
	for _, c := range plan.Corrupt {
		node := t.Ensembles[p][c.Node]
		if node == m.id {
			m.log.Warn("repair: corrupt shard on this node", "topic", t.Name, "partition", p, "offset", c.Offset, "err", c.Err)
		} else {
			m.log.Info("repair: corrupt shard on another node (its own repair rewrites it)", "topic", t.Name, "partition", p,
				"offset", c.Offset, "node", node, "err", c.Err)
		}
	}
	if plan.Ambiguous > 0 {
		m.log.Warn("repair: offsets with two decodable stripes left alone", "topic", t.Name, "partition", p,
			"range", plan.From, "count", plan.Ambiguous)
	}
}

// localEntries checks this node's slots of [from, to) (both CRCs) and
// keeps their headers.
func (m *maintenance) localEntries(topic string, p uint32, from, to uint64) ([]core.LocalSlot, error) {
	var out []core.LocalSlot
	err := m.io.Scan(topic, p, from, to, func(off uint64, shard []byte) bool {
		out = append(out, core.CheckLocal(off, shard))
		return true
	})
	return out, err
}

// applyFixes rebuilds and writes the fixes, a few at a time; false if any
// failed (the range is then not done and is walked again next pass).
func (m *maintenance) applyFixes(ctx context.Context, t *meta.Topic, p uint32, rc core.RepairConfig, fixes []core.Fix, cache shardCache) bool {
	if len(fixes) == 0 {
		return true
	}
	sem := make(chan struct{}, m.cfg.Concurrency)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for _, f := range fixes {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return false
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if !m.fix(ctx, t, p, rc, f, cache) {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	return !failed.Load()
}

// fix rebuilds one shard of this node and writes it through its owner.
func (m *maintenance) fix(ctx context.Context, t *meta.Topic, p uint32, rc core.RepairConfig, f core.Fix, cache shardCache) bool {
	shard, err := m.rebuild(ctx, t, p, rc, f, cache)
	if err != nil {
		if ctx.Err() == nil {
			m.stats.RepairFailures.Add(1)
			m.log.Warn("repair: cannot rebuild shard", "topic", t.Name, "partition", p, "offset", f.Offset, "stripe", f.Group.ID.String(), "err", err)
		}
		return false
	}
	if err := m.rate.wait(ctx, len(shard)); err != nil {
		return false
	}
	st, detail, err := m.io.RepairWrite(ctx, t, p, shard)
	switch {
	case err != nil:
		return false
	case st == bus.StatusOK:
		m.stats.ShardsRepaired.Add(1)
		if f.Replace {
			m.log.Info("repair: corrupt shard rewritten", "topic", t.Name, "partition", p, "offset", f.Offset, "stripe", f.Group.ID.String())
		}
		return true
	case st == bus.StatusConflict:
		// Another good shard holds the slot (the producer's rewrite rule,
		// docs/design.md#write-path step 7, covers its stripe): nothing to repair here.
		m.log.Info("repair: slot holds another stripe", "topic", t.Name, "partition", p, "offset", f.Offset, "detail", detail)
		return true
	}
	m.stats.RepairFailures.Add(1)
	m.log.Warn("repair: write refused", "topic", t.Name, "partition", p, "offset", f.Offset, "status", st.String(), "detail", detail)
	return false
}

// rebuild fetches k shards of the fix's group (from the prefetched cache
// when it has them; other sources when some fail) and rebuilds and checks
// this node's shard.
func (m *maintenance) rebuild(ctx context.Context, t *meta.Topic, p uint32, rc core.RepairConfig, f core.Fix, cache shardCache) ([]byte, error) {
	fetched := make(map[int][]byte, t.Params.K)
	var errs []error
	next := 0
	for len(fetched) < t.Params.K && next < len(f.Sources) {
		batch := f.Sources[next:min(next+t.Params.K-len(fetched), len(f.Sources))]
		next += len(batch)
		got := make([][]byte, len(batch))
		gotErr := make([]error, len(batch))
		var wg sync.WaitGroup
		for i, pos := range batch {
			if b, ok := cache.get(pos, f.Offset); ok {
				got[i] = b
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], gotErr[i] = m.fetchShard(ctx, t, p, pos, f.Offset)
			}()
		}
		wg.Wait()
		for i, pos := range batch {
			if gotErr[i] == nil {
				if s, err := stripe.Parse(got[i]); err != nil {
					gotErr[i] = err
				} else if !s.SameStripe(&f.Group) {
					gotErr[i] = fmt.Errorf("%w: position %d now holds stripe %s", core.ErrRebuild, pos, s.ID)
				}
			}
			if gotErr[i] != nil {
				errs = append(errs, fmt.Errorf("position %d: %w", pos, gotErr[i]))
				continue
			}
			fetched[pos] = got[i]
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if len(fetched) < t.Params.K {
		return nil, fmt.Errorf("%w: fetched %d of k=%d: %w", stripe.ErrTooFewShards, len(fetched), t.Params.K, errors.Join(errs...))
	}
	if m.cfg.Bugs.NoProof {
		for _, pos := range f.Sources {
			if b, ok := fetched[pos]; ok {
				sh, err := stripe.Parse(b)
				if err != nil {
					return nil, err
				}
				sh.Index = uint8(rc.Pos)
				return sh.Marshal(), nil
			}
		}
	}
	return core.RebuildShard(rc, f, fetched)
}

// targetsBetweenRanges runs the queued targets from inside a walk when
// one was added since they last ran, or when they last ran an Interval
// ago and some are waiting (a dead node may be back).
func (m *maintenance) targetsBetweenRanges(ctx context.Context) {
	if m.targetsAdded.Load() || time.Since(m.targetsRun) >= m.cfg.Interval {
		m.mu.Lock()
		waiting := len(m.targets) > 0
		m.mu.Unlock()
		if waiting {
			m.repairTargets(ctx)
		}
	}
}

// repairTargets handles the queued single offsets: corrupt shards found by
// scrub and readers' in-doubt reports.
func (m *maintenance) repairTargets(ctx context.Context) {
	m.targetsAdded.Store(false)
	// Stamped when done: a run slower than Interval (targets waiting on a
	// dead peer's timeout) must not be repeated before every range of a
	// walk (found by the simulation's repair model).
	defer func() { m.targetsRun = time.Now() }()
	m.mu.Lock()
	keys := make([]targetKey, 0, len(m.targets))
	for k := range m.targets {
		keys = append(keys, k)
	}
	m.mu.Unlock()
	slices.SortFunc(keys, func(a, b targetKey) int {
		switch {
		case a.offset < b.offset:
			return -1
		case a.offset > b.offset:
			return 1
		}
		return 0
	})
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		tg := m.targets[k]
		var cp target
		if tg != nil {
			cp = *tg
		}
		m.mu.Unlock()
		if tg == nil {
			continue
		}
		if m.repairTarget(ctx, k, cp) {
			m.mu.Lock()
			delete(m.targets, k)
			m.mu.Unlock()
		}
	}
}

// repairTarget handles one target; true when it is done with.
func (m *maintenance) repairTarget(ctx context.Context, k targetKey, tg target) bool {
	t, err := m.io.Catalog().Topic(k.topic)
	if err != nil || int(k.partition) >= t.Partitions {
		return true
	}
	pos := t.Position(k.partition, m.id)
	if pos < 0 {
		return true
	}
	rc := m.repairConfig(t, pos)
	from, to := k.offset, k.offset+1
	peers := m.scanPeers(ctx, t, k.partition, pos, from, to, false, nil)
	local, err := m.localEntries(t.Name, k.partition, from, to)
	if err != nil {
		return false
	}
	plan := core.PlanRange(rc, from, to, local, peers, false)
	m.account(t, k.partition, plan)
	done := m.applyFixes(ctx, t, k.partition, rc, plan.Fixes, nil) && len(plan.Unresolved) == 0
	if tg.corrupt && done && len(plan.Fixes) == 0 {
		for _, c := range plan.Corrupt {
			if c.Node == pos {
				m.log.Error("repair: corrupt shard cannot be rebuilt: its stripe is not decodable from the other nodes",
					"topic", t.Name, "partition", k.partition, "offset", k.offset)
			}
		}
	}
	if !tg.inDoubt {
		return done
	}
	if len(plan.Fixes) > 0 { // this node's own shard is there now
		if local, err = m.localEntries(t.Name, k.partition, from, to); err != nil {
			return false
		}
	}
	return m.resolveInDoubt(ctx, t, k, tg, rc, local, peers) && done
}
