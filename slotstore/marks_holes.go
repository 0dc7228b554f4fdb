package slotstore

import (
	"fmt"
	"slices"

	"github.com/syndtr/goleveldb/leveldb"
)

// Marks and holes: what repair and retention record per partition
// (docs/design.md#slot-store, docs/design.md#repair-and-scrub); keys in keys.go.
//
//   - Marks: per-partition values that only rise, kept durably like seals:
//     MarkRepaired (repair has filled every slot of the partition below it
//     that this incarnation may have missed before its birth) and
//     MarkDropped (retention dropped everything below it; repair never
//     refills it), MarkVerified (the repair loop's verified frontier).
//   - Holes: offsets below the birth that repair could not fill and that
//     may have held a committed shard (the stripe is not decodable from
//     the other nodes). The node keeps answering "unknown" there, never
//     "empty". DropBefore drops holes with the slots.
//
// A Batch carries them (RaiseMark, PutHole) as metaPuts; the committer
// writes them with the batch's slots and seals (writeMetas, applyMetas).

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

// applyMetas applies marks and holes (mu held, committer goroutine).
func (m *MemStore) applyMetas(metas []metaPut) {
	for _, mp := range metas {
		if mp.kind == markClockFloor {
			m.clockFloor = max(m.clockFloor, mp.raise)
			continue
		}
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
