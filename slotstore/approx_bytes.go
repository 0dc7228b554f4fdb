package slotstore

import (
	"fmt"

	"github.com/syndtr/goleveldb/leveldb/util"
)

// ApproxBytes: the bytes a key range of one partition takes, for
// size-based retention (docs/design.md#slot-store).

// ApproxBytes implements Store with LevelDB's SizeOf: the on-disk size of
// the key range in table files (writes still in the memtable are not
// counted).
func (s *levelStore) ApproxBytes(topic string, partition uint32, from, to uint64) (int64, error) {
	op := fmt.Sprintf("size of topic %q partition %d [%d, %d)", topic, partition, from, to)
	if err := ValidateTopic(topic); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if from >= to {
		return 0, nil
	}
	if err := s.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer s.gate.leave()
	sizes, err := s.db.SizeOf([]util.Range{*keyRange(partPrefix(tagSlot, topic, partition), from, to)})
	if err != nil {
		return 0, wrapDB(s.dir, op, err)
	}
	return sizes.Sum(), nil
}

// ApproxBytes implements Store: the exact shard bytes in the range.
func (m *MemStore) ApproxBytes(topic string, partition uint32, from, to uint64) (int64, error) {
	var total int64
	err := m.Scan(topic, partition, from, to, func(_ uint64, shard []byte) bool {
		total += int64(len(shard))
		return true
	})
	return total, err
}
