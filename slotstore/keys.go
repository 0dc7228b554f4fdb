package slotstore

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/syndtr/goleveldb/leveldb/util"
)

// On-disk key layout, big-endian so that a partition's slots (and seals)
// are one contiguous range ordered by offset:
//
//	slot: 's' | uint16 len(topic) | topic | uint32 partition | uint64 offset
//	seal: 'e' | uint16 len(topic) | topic | uint32 partition | uint64 rangeStart  → uint64 seal
//	mark: 'r' | uint16 len(topic) | topic | uint32 partition | kind u8            → uint64 (marks_holes.go)
//	hole: 'h' | uint16 len(topic) | topic | uint32 partition | uint64 offset      → empty (marks_holes.go)
//	meta: "m/incarnation" → 16-byte id | uint64 birth
//	meta: "m/birth-provisional" → empty (present until SettleBirth)
const (
	tagSlot = 's'
	tagSeal = 'e'
	tagMark = 'r'
	tagHole = 'h'

	// MaxTopicLen is the longest topic name the store accepts.
	MaxTopicLen = 200
)

var (
	metaIncarnation      = []byte("m/incarnation")
	metaBirthProvisional = []byte("m/birth-provisional")
	metaPrefix           = []byte("m/")
)

// ValidateTopic reports whether topic can be stored: 1..200 bytes, no NUL.
func ValidateTopic(topic string) error {
	switch {
	case len(topic) == 0:
		return fmt.Errorf("%w: empty topic", ErrInvalid)
	case len(topic) > MaxTopicLen:
		return fmt.Errorf("%w: topic of %d bytes (max %d)", ErrInvalid, len(topic), MaxTopicLen)
	case strings.IndexByte(topic, 0) >= 0:
		return fmt.Errorf("%w: topic %q contains NUL", ErrInvalid, topic)
	}
	return nil
}

// partPrefix is tag | topic | partition: the prefix of every key of one
// partition. cap leaves room for the 8-byte offset.
func partPrefix(tag byte, topic string, partition uint32) []byte {
	b := make([]byte, 0, 1+2+len(topic)+4+8)
	b = append(b, tag)
	b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
	b = append(b, topic...)
	return binary.BigEndian.AppendUint32(b, partition)
}

func withOffset(prefix []byte, offset uint64) []byte {
	out := make([]byte, len(prefix), len(prefix)+8)
	copy(out, prefix)
	return binary.BigEndian.AppendUint64(out, offset)
}

func slotKey(k Key) []byte {
	return binary.BigEndian.AppendUint64(partPrefix(tagSlot, k.Topic, k.Partition), k.Offset)
}

func sealKey(topic string, partition uint32, rangeStart uint64) []byte {
	return binary.BigEndian.AppendUint64(partPrefix(tagSeal, topic, partition), rangeStart)
}

func markKey(kind MarkKind, topic string, partition uint32) []byte {
	return append(partPrefix(tagMark, topic, partition), byte(kind))
}

func holeKey(topic string, partition uint32, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(partPrefix(tagHole, topic, partition), offset)
}

// keyRange is the key range prefix|[from, to).
func keyRange(prefix []byte, from, to uint64) *util.Range {
	return &util.Range{Start: withOffset(prefix, from), Limit: withOffset(prefix, to)}
}

// keyOffset returns the trailing offset of a slot or seal key.
func keyOffset(key []byte) uint64 {
	return binary.BigEndian.Uint64(key[len(key)-8:])
}

// decodeSeal parses a seal value.
func decodeSeal(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: seal value of %d bytes, want 8", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
