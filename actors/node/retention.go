package node

import (
	"context"
	"math"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
)

// Retention (docs/design.md#slot-store): offsets are time, so retention drops whole owner
// ranges (slotstore.DropBefore), per topic:
//
//   - by time: every range entirely older than now - Retention
//     (core.RetentionCut); never a range that reaches into the limit;
//   - by size: the partition's oldest whole ranges while its bytes on this
//     node exceed RetentionBytes (an estimate: slotstore.ApproxBytes).
//
// Neither ever drops a range younger than now - D - margin (still being
// written or read). The cut is recorded (MarkDropped) so that repair never
// refills what retention dropped.

func (m *maintenance) retentionPass(ctx context.Context) {
	for _, t := range m.topics() {
		if t.Retention <= 0 && t.RetentionBytes <= 0 {
			continue
		}
		for p := range t.Partitions {
			if ctx.Err() != nil {
				return
			}
			if t.Position(uint32(p), m.n.cfg.ID) < 0 {
				continue
			}
			if err := m.retainPartition(ctx, t, uint32(p), m.n.cfg.Now()); err != nil && ctx.Err() == nil {
				m.log.Warn("retention: partition failed", "topic", t.Name, "partition", p, "err", err)
			}
		}
	}
}

// retainPartition applies a topic's retention to one partition at now.
func (m *maintenance) retainPartition(ctx context.Context, t *meta.Topic, p uint32, now int64) error {
	pr, err := m.part(t.Name, p)
	if err != nil {
		return err
	}
	safe := core.RangeStart(uint64(max(now-int64(t.Params.ReadDelay+m.cfg.Margin), 0)))
	var cut uint64
	if t.Retention > 0 {
		cut = core.RetentionCut(now, int64(t.Retention))
	}
	if t.RetentionBytes > 0 {
		sc, err := m.sizeCut(t.Name, p, t.RetentionBytes, safe)
		if err != nil {
			return err
		}
		cut = max(cut, sc)
	}
	cut = min(cut, safe)
	pr.mu.Lock()
	last := pr.lastCut
	pr.mu.Unlock()
	if cut == 0 || cut <= last {
		return nil
	}
	n, err := m.n.cfg.Store.DropBefore(t.Name, p, cut)
	if err != nil {
		return err
	}
	b := &slotstore.Batch{}
	b.RaiseMark(slotstore.MarkDropped, t.Name, p, cut)
	if err := m.commitWait(ctx, b); err != nil {
		return err
	}
	pr.mu.Lock()
	pr.lastCut = cut
	pr.dropped = max(pr.dropped, cut)
	pr.mu.Unlock()
	m.n.stats.RetentionDropped.Add(int64(n))
	if n > 0 {
		m.log.Info("retention: dropped old ranges", "topic", t.Name, "partition", p, "before", cut, "slots", n)
	}
	return nil
}

// sizeCut returns where to cut so that what is left of the partition on
// this node fits in limit bytes: after the oldest whole ranges whose bytes
// cover the excess, never beyond safe (0: nothing to drop).
func (m *maintenance) sizeCut(topic string, p uint32, limit int64, safe uint64) (uint64, error) {
	st := m.n.cfg.Store
	total, err := st.ApproxBytes(topic, p, 0, math.MaxUint64)
	if err != nil || total <= limit {
		return 0, err
	}
	excess := total - limit
	var cut, freed int64
	next := func(from uint64) (uint64, bool, error) {
		var off uint64
		found := false
		err := st.Scan(topic, p, from, math.MaxUint64, func(o uint64, _ []byte) bool {
			off, found = o, true
			return false
		})
		return off, found, err
	}
	for cur := uint64(0); freed < excess; {
		off, ok, err := next(cur)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo := core.RangeStart(off)
		end := lo + core.RangeNanos
		if end > safe {
			break
		}
		size, err := st.ApproxBytes(topic, p, lo, end)
		if err != nil {
			return 0, err
		}
		freed += size
		cut = int64(end)
		cur = end
	}
	return uint64(cut), nil
}
