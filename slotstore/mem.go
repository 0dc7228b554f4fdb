package slotstore

import (
	"fmt"
	"maps"
	"slices"
	"sync"
)

// MemStore is an in-memory Store with the LevelDB store's semantics, for
// tests and simulation. A write is "durable" once the committer has applied
// it (just before its done runs); a write still queued is not, and Crash
// loses it. Hold, Release, Crash and FailNextWrite are test controls.
type MemStore struct {
	opts Options
	inc  Incarnation
	c    *committer
	gate gate

	mu       sync.RWMutex // guards parts and failNext
	parts    map[partID]*memPart
	failNext error
	// clockFloor: Batch.RaiseClockFloor's durable value (clock_floor.go).
	clockFloor uint64
}

type partID struct {
	topic     string
	partition uint32
}

// memPart is one partition's slots (offsets kept sorted) and seals.
// Stored shard slices are never modified, so readers may share them.
type memPart struct {
	offsets []uint64
	shards  map[uint64][]byte
	seals   map[uint64]uint64 // rangeStart → seal
	marks   map[MarkKind]uint64
	holes   map[uint64]struct{}
}

var _ Store = (*MemStore)(nil)

// NewMem returns an empty in-memory store with a new Incarnation.
func NewMem(opts Options) *MemStore {
	opts = opts.withDefaults()
	return newMem(opts, newIncarnation(opts.Now), make(map[partID]*memPart))
}

func newMem(opts Options, inc Incarnation, parts map[partID]*memPart) *MemStore {
	m := &MemStore{opts: opts, inc: inc, parts: parts}
	m.c = newCommitter(m, opts)
	return m
}

// Hold stops the committer: commits queue up and stay not durable (their
// done does not run) until Release. Hold waits for a group already being
// written, so after it returns nothing more becomes durable. Close flushes
// even a held queue; Crash drops it.
func (m *MemStore) Hold() { m.c.hold() }

// Release lets the committer write the queued commits again.
func (m *MemStore) Release() { m.c.release() }

// FailNextWrite makes the committer's next write fail with err, as an fsync
// failure would: that group's done and every later Commit get the error.
func (m *MemStore) FailNextWrite(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failNext = err
}

// Crash simulates a power loss: every commit whose done has not run is
// dropped (its done runs with an error wrapping ErrClosed, never nil), m is
// closed, and a new MemStore over the durable state only is returned, with
// the same Incarnation and Options. Crash must not be called from a done.
func (m *MemStore) Crash() *MemStore {
	m.c.stop(stateCrashing)
	m.gate.close()
	m.mu.RLock()
	defer m.mu.RUnlock()
	parts := make(map[partID]*memPart, len(m.parts))
	for id, p := range m.parts {
		parts[id] = &memPart{offsets: slices.Clone(p.offsets), shards: maps.Clone(p.shards), seals: maps.Clone(p.seals),
			marks: maps.Clone(p.marks), holes: maps.Clone(p.holes)}
	}
	c := newMem(m.opts, m.inc, parts)
	c.clockFloor = m.clockFloor
	return c
}

func (m *MemStore) Commit(b *Batch, done func(error)) { m.c.commit(b, done) }

func (m *MemStore) Get(k Key) ([]byte, error) {
	op := "get " + k.String()
	if err := ValidateTopic(k.Topic); err != nil {
		return nil, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if err := m.gate.enter(); err != nil {
		return nil, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer m.gate.leave()
	v, ok := m.slot(k)
	if !ok {
		return nil, fmt.Errorf("slotstore: %s: %w", op, ErrNotFound)
	}
	return verifyShard(op, slices.Clone(v))
}

func (m *MemStore) slot(k Key) ([]byte, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p := m.parts[partID{k.Topic, k.Partition}]
	if p == nil {
		return nil, false
	}
	v, ok := p.shards[k.Offset]
	return v, ok
}

// Scan visits a snapshot taken when it starts, like a LevelDB iterator.
func (m *MemStore) Scan(topic string, partition uint32, from, to uint64, fn func(uint64, []byte) bool) error {
	op := fmt.Sprintf("scan topic %q partition %d [%d, %d)", topic, partition, from, to)
	if err := ValidateTopic(topic); err != nil {
		return fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if from >= to {
		return nil
	}
	if err := m.gate.enter(); err != nil {
		return fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer m.gate.leave()
	offsets, shards := m.snapshot(partID{topic, partition}, from, to)
	for i, off := range offsets {
		if !fn(off, shards[i]) {
			break
		}
	}
	return nil
}

func (m *MemStore) snapshot(id partID, from, to uint64) ([]uint64, [][]byte) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p := m.parts[id]
	if p == nil {
		return nil, nil
	}
	lo, _ := slices.BinarySearch(p.offsets, from)
	hi, _ := slices.BinarySearch(p.offsets, to)
	offsets := slices.Clone(p.offsets[lo:hi])
	shards := make([][]byte, len(offsets))
	for i, off := range offsets {
		shards[i] = p.shards[off]
	}
	return offsets, shards
}

func (m *MemStore) Seal(topic string, partition uint32, rangeStart uint64) (uint64, error) {
	op := fmt.Sprintf("seal of topic %q partition %d range %d", topic, partition, rangeStart)
	if err := ValidateTopic(topic); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if err := m.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer m.gate.leave()
	m.mu.RLock()
	defer m.mu.RUnlock()
	if p := m.parts[partID{topic, partition}]; p != nil {
		return p.seals[rangeStart], nil
	}
	return 0, nil
}

func (m *MemStore) DropBefore(topic string, partition uint32, before uint64) (int, error) {
	op := fmt.Sprintf("drop topic %q partition %d before %d", topic, partition, before)
	if err := ValidateTopic(topic); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if err := m.c.failure(); err != nil {
		return 0, err
	}
	if err := m.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer m.gate.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[partID{topic, partition}]
	if p == nil {
		return 0, nil
	}
	n, _ := slices.BinarySearch(p.offsets, before)
	for _, off := range p.offsets[:n] {
		delete(p.shards, off)
	}
	p.offsets = slices.Clone(p.offsets[n:])
	maps.DeleteFunc(p.seals, func(rangeStart, _ uint64) bool { return rangeStart < before })
	p.dropHoles(before)
	return n, nil
}

func (m *MemStore) Incarnation() Incarnation { return m.inc }

// SettleBirth implements Store. A MemStore's incarnation is never
// provisional (tests and the simulation set its clock through Options.Now),
// so this only returns it.
func (m *MemStore) SettleBirth(uint64) (Incarnation, error) { return m.inc, nil }

// DiskBytes is 0: a MemStore uses no disk.
func (m *MemStore) DiskBytes() int64 { return 0 }

// Close flushes the queue and closes the store; later calls return nil.
func (m *MemStore) Close() error {
	m.c.stop(stateClosing)
	m.gate.close()
	return nil
}

// lookup implements backend.
func (m *MemStore) lookup(k Key, _ []byte) ([]byte, bool, error) {
	v, ok := m.slot(k)
	return v, ok, nil
}

// write implements backend: apply a group atomically under mu.
func (m *MemStore) write(items []*item) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failNext; err != nil {
		m.failNext = nil
		return fmt.Errorf("slotstore: mem write: %w", err)
	}
	for _, it := range items {
		for _, p := range it.puts {
			m.part(p.key.Topic, p.key.Partition).put(p.key.Offset, slices.Clone(p.shard))
		}
		for _, s := range it.seals {
			seals := m.part(s.topic, s.partition).seals
			seals[s.rangeStart] = max(seals[s.rangeStart], s.seal)
		}
		m.applyMetas(it.metas)
	}
	return nil
}

func (m *MemStore) part(topic string, partition uint32) *memPart {
	id := partID{topic, partition}
	p := m.parts[id]
	if p == nil {
		p = &memPart{shards: make(map[uint64][]byte), seals: make(map[uint64]uint64)}
		m.parts[id] = p
	}
	return p
}

func (p *memPart) put(off uint64, shard []byte) {
	if _, ok := p.shards[off]; !ok {
		if n := len(p.offsets); n == 0 || p.offsets[n-1] < off {
			p.offsets = append(p.offsets, off)
		} else {
			i, _ := slices.BinarySearch(p.offsets, off)
			p.offsets = slices.Insert(p.offsets, i, off)
		}
	}
	p.shards[off] = shard
}
