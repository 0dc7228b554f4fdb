package slotstore

import "fmt"

type slotPut struct {
	key   Key
	enc   []byte // slotKey(key)
	shard []byte
	// replace: overwrite a corrupt shard (Batch.ReplaceCorrupt, replace_corrupt.go).
	replace bool
}

type sealSet struct {
	topic      string
	partition  uint32
	rangeStart uint64
	seal       uint64
	enc        []byte // sealKey(...)
}

// Batch is a set of writes that Commit applies atomically and durably.
// Build it in one goroutine; after Commit, leave it (and its shard slices)
// alone until done runs. An invalid write (bad topic, empty or oversized
// shard) marks the whole batch failed: Commit passes that error to done.
type Batch struct {
	puts  []slotPut
	seals []sealSet
	metas []metaPut // marks and holes (marks_holes.go)
	bytes int
	err   error
}

// PutSlot stores shard (a marshalled stripe.Shard) in slot k, write-once.
func (b *Batch) PutSlot(k Key, shard []byte) {
	if err := ValidateTopic(k.Topic); err != nil {
		b.fail(fmt.Errorf("slotstore: put %s: %w", k, err))
		return
	}
	if len(shard) == 0 || len(shard) > MaxShardBytes {
		b.fail(fmt.Errorf("slotstore: put %s: %w: shard of %d bytes (must be 1..%d)", k, ErrInvalid, len(shard), MaxShardBytes))
		return
	}
	b.puts = append(b.puts, slotPut{key: k, enc: slotKey(k), shard: shard})
	b.bytes += len(shard)
}

// SetSeal raises the seal of the range starting at rangeStart to seal
// (a lower value than the stored one is ignored: seals never go down).
func (b *Batch) SetSeal(topic string, partition uint32, rangeStart uint64, seal uint64) {
	if err := ValidateTopic(topic); err != nil {
		b.fail(fmt.Errorf("slotstore: seal partition %d range %d: %w", partition, rangeStart, err))
		return
	}
	b.seals = append(b.seals, sealSet{topic: topic, partition: partition, rangeStart: rangeStart,
		seal: seal, enc: sealKey(topic, partition, rangeStart)})
}

// Len returns the number of writes in the batch.
func (b *Batch) Len() int { return len(b.puts) + len(b.seals) + len(b.metas) }

func (b *Batch) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}
