package node

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/stripe"
)

// Scrub (docs/design.md#repair-and-scrub): a background pass that re-reads every shard this node
// holds, rate limited, and checks it (both CRCs, and that it belongs at its
// slot: index, offset, shape). A bad shard is logged, counted and handed
// to the repair loop, which rebuilds it from k others and replaces it.

// scrubChunk bounds the slots copied out of one store scan.
const (
	scrubChunk      = 256
	scrubChunkBytes = 4 << 20
)

func (m *maintenance) scrubPass(ctx context.Context) {
	start := time.Now()
	checked, bad := 0, 0
	for _, t := range m.topics() {
		for p := range t.Partitions {
			pos := t.Position(uint32(p), m.id)
			if pos < 0 {
				continue
			}
			c, b, err := m.scrubPartition(ctx, t, uint32(p), pos)
			checked, bad = checked+c, bad+b
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				m.log.Warn("scrub: partition failed", "topic", t.Name, "partition", p, "err", err)
			}
		}
	}
	m.stats.ScrubPasses.Add(1)
	m.log.Debug("scrub: pass done", "shards", checked, "corrupt", bad, "took", time.Since(start))
}

// scrubPartition checks one partition's shards, a chunk at a time.
func (m *maintenance) scrubPartition(ctx context.Context, t *meta.Topic, p uint32, pos int) (checked, bad int, err error) {
	for cur := uint64(0); ctx.Err() == nil; {
		var chunk []entryCopy
		size := 0
		err := m.io.Scan(t.Name, p, cur, math.MaxUint64, func(off uint64, shard []byte) bool {
			chunk = append(chunk, entryCopy{off, append([]byte(nil), shard...)})
			size += len(shard)
			return len(chunk) < scrubChunk && size < scrubChunkBytes
		})
		if err != nil || len(chunk) == 0 {
			return checked, bad, err
		}
		for _, e := range chunk {
			if err := m.scrub.wait(ctx, len(e.shard)); err != nil {
				return checked, bad, nil
			}
			checked++
			m.stats.ScrubbedShards.Add(1)
			if err := checkStored(t, pos, e.off, e.shard); err != nil {
				bad++
				m.stats.ScrubCorrupt.Add(1)
				m.log.Warn("scrub: corrupt shard; handing it to repair", "topic", t.Name, "partition", p, "offset", e.off, "err", err)
				m.addTarget(targetKey{topic: t.Name, partition: p, offset: e.off}, true, nil)
			}
		}
		cur = chunk[len(chunk)-1].off + 1
		if cur == 0 {
			return checked, bad, nil // wrapped past MaxUint64
		}
	}
	return checked, bad, nil
}

type entryCopy struct {
	off   uint64
	shard []byte
}

// checkStored verifies one stored shard of ensemble position pos.
func checkStored(t *meta.Topic, pos int, off uint64, b []byte) error {
	s, err := stripe.Parse(b)
	if err != nil {
		return err
	}
	if int(s.Index) != pos || s.Offset != off || int(s.N) != t.Params.N || int(s.K) != t.Params.K {
		return fmt.Errorf("%w: shard index %d offset %d n=%d k=%d stored at position %d offset %d",
			stripe.ErrCorruptShard, s.Index, s.Offset, s.N, s.K, pos, off)
	}
	return nil
}
