package slotstore

import "fmt"

// The clock floor: one node-wide value that only rises, the highest clock
// (unix ns) the node may have used to close offsets for readers
// (docs/design.md#the-read-frontier). A node that answered a scan at clock
// c refuses every write older than c - A from then on; after a restart,
// possibly with its clock stepped back, it keeps that promise by refusing
// writes older than ClockFloor() - A. It is written like a mark (the
// larger value wins) under the meta key "m/clock-floor".

var metaClockFloor = []byte("m/clock-floor")

// markClockFloor tags the clock floor's metaPut (it is not a partition mark).
const markClockFloor MarkKind = 0xff

// RaiseClockFloor raises the node's clock floor to v (a lower value than
// the stored one is ignored).
func (b *Batch) RaiseClockFloor(v uint64) {
	b.metas = append(b.metas, metaPut{enc: metaClockFloor, raise: v, kind: markClockFloor})
}

// ClockFloor implements Store.
func (s *levelStore) ClockFloor() (uint64, error) {
	const op = "clock floor"
	if err := s.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer s.gate.leave()
	v, _, err := s.readSeal(op, metaClockFloor) // same encoding as a seal
	return v, err
}

// ClockFloor implements Store.
func (m *MemStore) ClockFloor() (uint64, error) {
	if err := m.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: clock floor: %w", err)
	}
	defer m.gate.leave()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.clockFloor, nil
}
