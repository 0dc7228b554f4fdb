package core

import (
	"errors"
	"fmt"

	"github.com/raidq/raidq/stripe"
)

// ErrRebuild: a rebuilt shard does not match the stripe it was rebuilt from.
var ErrRebuild = errors.New("rebuilt shard does not match its stripe")

// RebuildShard rebuilds this node's shard of fix from fetched whole shards
// (marshalled, by ensemble position; at least k of the group) and proves
// it: every fetched shard must parse, belong to the group and re-encode to
// exactly its bytes, every header seen must match the re-encoding, and the
// rebuilt shard must carry the group's stripe id, shape and payload CRC.
// The result is byte-identical to the shard the producer sent (producers
// set no flags). Errors wrap ErrRebuild, stripe.ErrCorruptShard or
// stripe.ErrTooFewShards.
func RebuildShard(cfg RepairConfig, fix Fix, fetched map[int][]byte) ([]byte, error) {
	p := cfg.Params
	shards := make([]*stripe.Shard, p.N)
	have := 0
	for pos, raw := range fetched {
		if pos < 0 || pos >= p.N || pos == cfg.Pos {
			continue
		}
		s, err := stripe.Parse(raw)
		if err == nil {
			err = checkPlace(p, &s.ShardHeader, pos, fix.Offset)
		}
		if err == nil && !s.SameStripe(&fix.Group) {
			err = fmt.Errorf("%w: position %d holds stripe %s, not %s", ErrRebuild, pos, s.ID, fix.Group.ID)
		}
		if err != nil {
			return nil, fmt.Errorf("offset %d: fetched shard of position %d: %w", fix.Offset, pos, err)
		}
		shards[pos] = &s
		have++
	}
	if have < p.K {
		return nil, fmt.Errorf("offset %d: %w: %d fetched, k=%d", fix.Offset, stripe.ErrTooFewShards, have, p.K)
	}
	all, err := stripe.Rebuild(shards)
	if err != nil {
		return nil, fmt.Errorf("offset %d: %w", fix.Offset, err)
	}
	for pos, s := range shards {
		if s == nil {
			continue
		}
		re := all[pos]
		re.Flags = s.Flags
		if got := re.Marshal(); string(got) != string(fetched[pos]) {
			return nil, fmt.Errorf("offset %d: %w: position %d does not re-encode to its bytes", fix.Offset, ErrRebuild, pos)
		}
	}
	for pos, h := range fix.Headers {
		if h == nil || pos == cfg.Pos {
			continue
		}
		re := all[pos].ShardHeader
		re.Flags = h.Flags
		if re != *h {
			return nil, fmt.Errorf("offset %d: %w: header of position %d differs from the re-encoding", fix.Offset, ErrRebuild, pos)
		}
	}
	out := all[cfg.Pos]
	if out.ID != fix.Group.ID || out.PayloadCRC != fix.Group.PayloadCRC || out.PayloadLen != fix.Group.PayloadLen ||
		out.Offset != fix.Offset || int(out.Index) != cfg.Pos || out.Flags != 0 {
		return nil, fmt.Errorf("offset %d: %w: rebuilt shard %d of stripe %s", fix.Offset, ErrRebuild, out.Index, out.ID)
	}
	return out.Marshal(), nil
}
