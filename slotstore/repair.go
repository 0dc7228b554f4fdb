package slotstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/util"

	"github.com/raidq/raidq/stripe"
)

// What repair, scrub and retention need from the store (DESIGN §4, §6):
//
//   - ReplaceCorrupt: the one way to overwrite a slot. The committer checks
//     that the bytes there fail their checks (stripe.Parse, or a LevelDB
//     checksum); a good shard is never overwritten (the batch fails with
//     ErrInvalid instead).
//   - Marks: per-partition values that only rise, kept durably like seals:
//     MarkRepaired (repair has filled every slot of the partition below it
//     that this incarnation may have missed before its birth) and
//     MarkDropped (retention dropped everything below it; repair never
//     refills it), MarkVerified (the repair loop's verified frontier).
//   - Holes: offsets below the birth that repair could not fill and that
//     may have held a committed shard (the stripe is not decodable from
//     the other nodes). The node keeps answering "unknown" there, never
//     "empty". DropBefore drops holes with the slots.
//   - ApproxBytes: the bytes a key range of one partition takes, for
//     size-based retention.
//   - Tamper (Tamperer): tests and drills only; writes raw bytes into a
//     slot behind the committer's back, as disk corruption would.
//
// On-disk keys:
//
//	mark: 'r' | uint16 len(topic) | topic | uint32 partition | kind u8     → uint64
//	hole: 'h' | uint16 len(topic) | topic | uint32 partition | uint64 offset → empty

const (
	tagMark = 'r'
	tagHole = 'h'
)

// MarkKind names a per-partition mark.
type MarkKind uint8

const (
	// MarkRepaired: repair has filled [topic creation, mark) for this
	// incarnation (see Incarnation): below it, except at holes, the node
	// answers "empty" for an empty slot instead of "unknown".
	MarkRepaired MarkKind = 1
	// MarkDropped: retention has dropped every slot below it.
	MarkDropped MarkKind = 2
	// MarkVerified: the repair loop has verified every range below it
	// (back to where its walk started) against the other nodes, so a
	// restarted node resumes its rolling window from there.
	MarkVerified MarkKind = 3
)

func (k MarkKind) String() string {
	switch k {
	case MarkRepaired:
		return "repaired"
	case MarkDropped:
		return "dropped"
	case MarkVerified:
		return "verified"
	}
	return fmt.Sprintf("mark(%d)", uint8(k))
}

// metaPut is one mark raise or hole insert in a Batch.
type metaPut struct {
	enc   []byte
	raise uint64 // marks: the new value (kept only if higher)
	hole  bool   // holes: put an empty value
	// for MemStore
	part partID
	kind MarkKind
	off  uint64
}

func markKey(kind MarkKind, topic string, partition uint32) []byte {
	return append(partPrefix(tagMark, topic, partition), byte(kind))
}

func holeKey(topic string, partition uint32, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(partPrefix(tagHole, topic, partition), offset)
}

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

// RaiseMark raises mark kind of (topic, partition) to v (a lower value than
// the stored one is ignored: marks never go down).
func (b *Batch) RaiseMark(kind MarkKind, topic string, partition uint32, v uint64) {
	if err := ValidateTopic(topic); err != nil {
		b.fail(fmt.Errorf("slotstore: mark %s partition %d: %w", kind, partition, err))
		return
	}
	if kind < MarkRepaired || kind > MarkVerified {
		b.fail(fmt.Errorf("slotstore: %w: unknown mark %d", ErrInvalid, kind))
		return
	}
	b.metas = append(b.metas, metaPut{enc: markKey(kind, topic, partition), raise: v,
		part: partID{topic, partition}, kind: kind})
}

// PutHole records offset of (topic, partition) as a hole (see Holes).
func (b *Batch) PutHole(topic string, partition uint32, offset uint64) {
	if err := ValidateTopic(topic); err != nil {
		b.fail(fmt.Errorf("slotstore: hole partition %d offset %d: %w", partition, offset, err))
		return
	}
	b.metas = append(b.metas, metaPut{enc: holeKey(topic, partition, offset), hole: true,
		part: partID{topic, partition}, off: offset})
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

// Tamperer is implemented by both stores, for tests and drills only: it
// writes raw bytes into a slot (or deletes it, with nil) bypassing every
// check, as disk corruption would. Never use it in a node.
type Tamperer interface {
	Tamper(k Key, raw []byte) error
}

var (
	_ Tamperer = (*MemStore)(nil)
	_ Tamperer = (*levelStore)(nil)
)

// ---------------------------------------------------------------- LevelDB

// Mark implements Store.
func (s *levelStore) Mark(kind MarkKind, topic string, partition uint32) (uint64, error) {
	op := fmt.Sprintf("mark %s of topic %q partition %d", kind, topic, partition)
	if err := ValidateTopic(topic); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if err := s.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer s.gate.leave()
	v, _, err := s.readSeal(op, markKey(kind, topic, partition)) // same encoding as a seal
	return v, err
}

// Holes implements Store.
func (s *levelStore) Holes(topic string, partition uint32, from, to uint64) ([]uint64, error) {
	op := fmt.Sprintf("holes of topic %q partition %d [%d, %d)", topic, partition, from, to)
	if err := ValidateTopic(topic); err != nil {
		return nil, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if from >= to {
		return nil, nil
	}
	if err := s.gate.enter(); err != nil {
		return nil, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer s.gate.leave()
	prefix := partPrefix(tagHole, topic, partition)
	it := s.db.NewIterator(keyRange(prefix, from, to), nil)
	defer it.Release()
	var out []uint64
	for it.Next() {
		out = append(out, keyOffset(it.Key()))
	}
	if err := it.Error(); err != nil {
		return nil, wrapDB(s.dir, op, err)
	}
	return out, nil
}

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

// Tamper implements Tamperer.
func (s *levelStore) Tamper(k Key, raw []byte) error {
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.gate.leave()
	if raw == nil {
		return s.db.Delete(slotKey(k), nil)
	}
	return s.db.Put(slotKey(k), raw, nil)
}

// writeMetas adds the marks and holes of items to wb (committer goroutine).
func (s *levelStore) writeMetas(wb *leveldb.Batch, raised map[string]uint64, metas []metaPut) error {
	for _, m := range metas {
		if m.hole {
			wb.Put(m.enc, nil)
			continue
		}
		if err := s.raiseSeal(wb, raised, sealSet{seal: m.raise, enc: m.enc}); err != nil {
			return err
		}
	}
	return nil
}

// ---------------------------------------------------------------- MemStore

// Mark implements Store.
func (m *MemStore) Mark(kind MarkKind, topic string, partition uint32) (uint64, error) {
	if err := ValidateTopic(topic); err != nil {
		return 0, fmt.Errorf("slotstore: mark %s partition %d: %w", kind, partition, err)
	}
	if err := m.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: mark %s: %w", kind, err)
	}
	defer m.gate.leave()
	m.mu.RLock()
	defer m.mu.RUnlock()
	if p := m.parts[partID{topic, partition}]; p != nil {
		return p.marks[kind], nil
	}
	return 0, nil
}

// Holes implements Store.
func (m *MemStore) Holes(topic string, partition uint32, from, to uint64) ([]uint64, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, fmt.Errorf("slotstore: holes partition %d: %w", partition, err)
	}
	if err := m.gate.enter(); err != nil {
		return nil, fmt.Errorf("slotstore: holes: %w", err)
	}
	defer m.gate.leave()
	m.mu.RLock()
	defer m.mu.RUnlock()
	p := m.parts[partID{topic, partition}]
	if p == nil {
		return nil, nil
	}
	var out []uint64
	for off := range p.holes {
		if off >= from && off < to {
			out = append(out, off)
		}
	}
	slices.Sort(out)
	return out, nil
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

// Corrupt flips one byte of the shard in slot k (a data byte when there
// is one), as a bad disk would; for tests.
func (m *MemStore) Corrupt(k Key) error {
	v, ok := m.slot(k)
	if !ok {
		return fmt.Errorf("slotstore: corrupt %s: %w", k, ErrNotFound)
	}
	bad := bytes.Clone(v)
	bad[len(bad)-1] ^= 0x5a
	return m.Tamper(k, bad)
}

// Tamper implements Tamperer.
func (m *MemStore) Tamper(k Key, raw []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.part(k.Topic, k.Partition)
	if raw == nil {
		if _, ok := p.shards[k.Offset]; ok {
			delete(p.shards, k.Offset)
			i, _ := slices.BinarySearch(p.offsets, k.Offset)
			p.offsets = append(p.offsets[:i:i], p.offsets[i+1:]...)
		}
		return nil
	}
	p.put(k.Offset, bytes.Clone(raw))
	return nil
}

// applyMetas applies marks and holes (mu held, committer goroutine).
func (m *MemStore) applyMetas(metas []metaPut) {
	for _, mp := range metas {
		p := m.part(mp.part.topic, mp.part.partition)
		if mp.hole {
			if p.holes == nil {
				p.holes = make(map[uint64]struct{})
			}
			p.holes[mp.off] = struct{}{}
			continue
		}
		if p.marks == nil {
			p.marks = make(map[MarkKind]uint64)
		}
		p.marks[mp.kind] = max(p.marks[mp.kind], mp.raise)
	}
}

// dropHoles deletes the holes below before (mu held).
func (p *memPart) dropHoles(before uint64) {
	for off := range p.holes {
		if off < before {
			delete(p.holes, off)
		}
	}
}

// keyRange is the key range prefix|[from, to).
func keyRange(prefix []byte, from, to uint64) *util.Range {
	return &util.Range{Start: withOffset(prefix, from), Limit: withOffset(prefix, to)}
}
