package slotstore

import (
	"bytes"
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
// A new incarnation is provisional (its birth is the local clock) until
// settleBirth; a directory from before provisional births is settled.
func loadIncarnation(db *leveldb.DB, dir string, now func() uint64) (Incarnation, bool, error) {
	v, err := db.Get(metaIncarnation, nil)
	if err == nil {
		inc, err := decodeIncarnation(v)
		if err != nil {
			return inc, false, fmt.Errorf("slotstore: %s: open: %w", dir, err)
		}
		switch _, err := db.Get(metaBirthProvisional, nil); {
		case err == nil:
			inc.Provisional = true
		case !errors.Is(err, leveldb.ErrNotFound):
			return Incarnation{}, false, wrapDB(dir, "open: read incarnation", err)
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
	inc.Provisional = true
	var b leveldb.Batch
	b.Put(metaIncarnation, encodeIncarnation(inc))
	b.Put(metaBirthProvisional, nil)
	if err := db.Write(&b, &opt.WriteOptions{Sync: true}); err != nil {
		return Incarnation{}, false, wrapDB(dir, "open: write incarnation", err)
	}
	return inc, true, nil
}

// settleBirth implements Store.SettleBirth for LevelDB.
func settleBirth(db *leveldb.DB, dir string, inc Incarnation, birth uint64) (Incarnation, error) {
	if !inc.Provisional {
		return inc, nil
	}
	empty, err := onlyMeta(db, dir)
	if err != nil {
		return inc, err
	}
	settled := inc
	settled.Provisional = false
	if empty {
		settled.Birth = max(inc.Birth, birth)
	}
	var b leveldb.Batch
	b.Put(metaIncarnation, encodeIncarnation(settled))
	b.Delete(metaBirthProvisional)
	if err := db.Write(&b, &opt.WriteOptions{Sync: true}); err != nil {
		return inc, wrapDB(dir, "settle birth", err)
	}
	return settled, nil
}

// onlyMeta reports whether the database holds nothing but meta keys.
func onlyMeta(db *leveldb.DB, dir string) (bool, error) {
	it := db.NewIterator(nil, nil)
	defer it.Release()
	for it.Next() {
		if !bytes.HasPrefix(it.Key(), metaPrefix) {
			return false, nil
		}
	}
	if err := it.Error(); err != nil {
		return false, wrapDB(dir, "settle birth: check empty", err)
	}
	return true, nil
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
