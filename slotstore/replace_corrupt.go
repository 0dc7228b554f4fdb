package slotstore

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/raidq/raidq/stripe"
)

// Replacing a corrupt shard (docs/design.md#repair-and-scrub): ReplaceCorrupt is the one way to
// overwrite a slot, for repair and scrub. The committer checks that the
// bytes there fail their checks (stripe.Parse, or a LevelDB checksum); a
// good shard is never overwritten (the batch fails with ErrInvalid
// instead).

// ReplaceCorrupt overwrites the corrupt shard in slot k with shard (a
// repaired one). When the batch is committed, the bytes in the slot (or
// queued for it) must fail stripe.Parse or a LevelDB checksum; if they are
// a good shard, Commit fails the batch with an error wrapping ErrInvalid
// (same bytes as shard: a no-op; an empty slot: a plain put). Never a
// silent overwrite of good bytes.
func (b *Batch) ReplaceCorrupt(k Key, shard []byte) {
	b.PutSlot(k, shard)
	if n := len(b.puts); n > 0 && b.puts[n-1].key == k {
		b.puts[n-1].replace = true
	}
}

// checkReplace applies the ReplaceCorrupt rule to what the slot holds
// (old, ok, lookupErr from existingLocked). It returns (true, nil) for a
// no-op (same bytes), (false, nil) to go ahead with the put, or an error.
func (c *committer) checkReplace(p slotPut, old []byte, ok bool, lookupErr error) (bool, error) {
	switch {
	case lookupErr != nil && errors.Is(lookupErr, ErrCorrupt):
		return false, nil // LevelDB's own checksum failed: corrupt
	case lookupErr != nil:
		return false, lookupErr
	case !ok:
		return false, nil
	case bytes.Equal(old, p.shard):
		return true, nil
	}
	if _, err := stripe.Parse(old); err == nil {
		return false, fmt.Errorf("slotstore: replace %s: %w: the slot holds a good shard (%s); only a corrupt shard may be overwritten",
			p.key, ErrInvalid, describeShard(old))
	}
	c.log.Warn("slotstore: replacing a corrupt shard", "slot", p.key.String(), "old", describeShard(old), "new", describeShard(p.shard))
	return false, nil
}
