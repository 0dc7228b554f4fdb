package slotstore

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
)

const incarnationLen = 16 + 8

func newIncarnation(now func() uint64) Incarnation {
	var inc Incarnation
	rand.Read(inc.ID[:]) // never fails (crypto/rand crashes the program instead)
	inc.Birth = now()
	return inc
}

func encodeIncarnation(inc Incarnation) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), inc.ID[:]...), inc.Birth)
}

func decodeIncarnation(v []byte) (Incarnation, error) {
	var inc Incarnation
	if len(v) != incarnationLen {
		return inc, fmt.Errorf("%w: incarnation record of %d bytes, want %d", ErrCorrupt, len(v), incarnationLen)
	}
	copy(inc.ID[:], v)
	inc.Birth = binary.BigEndian.Uint64(v[16:])
	return inc, nil
}

// loadIncarnation reads the incarnation, or creates and syncs one if the
// database is empty. A database with data but no incarnation is corrupt:
// starting a new incarnation over old slots would blur "lost" and "never had".
func loadIncarnation(db *leveldb.DB, dir string, now func() uint64) (Incarnation, bool, error) {
	v, err := db.Get(metaIncarnation, nil)
	if err == nil {
		inc, err := decodeIncarnation(v)
		if err != nil {
			return inc, false, fmt.Errorf("slotstore: %s: open: %w", dir, err)
		}
		return inc, false, nil
	}
	if !errors.Is(err, leveldb.ErrNotFound) {
		return Incarnation{}, false, wrapDB(dir, "open: read incarnation", err)
	}
	if err := requireEmpty(db, dir); err != nil {
		return Incarnation{}, false, err
	}
	inc := newIncarnation(now)
	if err := db.Put(metaIncarnation, encodeIncarnation(inc), &opt.WriteOptions{Sync: true}); err != nil {
		return Incarnation{}, false, wrapDB(dir, "open: write incarnation", err)
	}
	return inc, true, nil
}

func requireEmpty(db *leveldb.DB, dir string) error {
	it := db.NewIterator(nil, nil)
	defer it.Release()
	if it.First() {
		return fmt.Errorf("slotstore: %s: open: %w: the database holds data (first key %q) but no incarnation record",
			dir, ErrCorrupt, it.Key())
	}
	if err := it.Error(); err != nil {
		return wrapDB(dir, "open: check empty", err)
	}
	return nil
}
