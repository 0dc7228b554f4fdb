package slotstore

import (
	"bytes"
	"fmt"
	"slices"
)

// Tamper hooks: FOR TESTS ONLY. Never use them in a node.
//
// They write raw bytes into a slot (or delete it) behind the committer's
// back, bypassing every check, as disk corruption would, so that tests can
// exercise what repair, scrub and readers do with a corrupt or lost shard.
// They live in the production package, not in a _test.go file, because
// tests of other packages use them: actors/node's repair tests corrupt a
// node's store through slotstore.Tamperer, and _test.go files are not
// compiled into other packages. (The process-level drills in
// scenarios/drill do not use them: they flip bytes in the LevelDB files of
// a stopped node.) Nothing in production code calls them; Store does not
// include Tamperer, so a node can only reach them with a type assertion.

// Tamperer is implemented by both stores, for tests only: it
// writes raw bytes into a slot (or deletes it, with nil) bypassing every
// check, as disk corruption would. Never use it in a node.
type Tamperer interface {
	Tamper(k Key, raw []byte) error
}

var (
	_ Tamperer = (*MemStore)(nil)
	_ Tamperer = (*levelStore)(nil)
)

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
