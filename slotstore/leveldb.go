package slotstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	"github.com/syndtr/goleveldb/leveldb"
	lerrors "github.com/syndtr/goleveldb/leveldb/errors"
	"github.com/syndtr/goleveldb/leveldb/filter"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/storage"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// dropChunk bounds the deletes DropBefore puts in one LevelDB write.
const dropChunk = 4096

// levelStore is the LevelDB Store. Reads run concurrently with the
// committer; the gate keeps Close from closing the DB under a reader.
type levelStore struct {
	dir  string
	db   *leveldb.DB
	stor *preallocStorage // nil with NoSync
	ls   *logStorage      // what db runs over: stor, or with NoSync a plain file storage
	opts Options
	incM sync.Mutex // guards inc (SettleBirth)
	inc  Incarnation
	c    *committer
	wo   *opt.WriteOptions
	wb   leveldb.Batch // reused by write (committer goroutine only)
	gate gate
}

// dbOptions are the LevelDB options: strict checksums everywhere, but not
// opt.StrictJournal, which would refuse to open a DB whose journal has the
// torn tail an ordinary power loss leaves (that tail was never acknowledged).
// Damage before the tail is refused by checkJournals instead.
// The write buffer holds two full groups, so that a group goes through the
// journal rather than goleveldb's large-batch path (one table per write).
//
// Each store adds a random quarter to its write buffer. The nodes of an
// ensemble receive the same bytes, so with equal buffers they would all
// flush a memtable to disk (an 8 MiB write and fsync each), rotate their
// journals and refill their spares at the same moment, and the acks'
// fdatasyncs would queue behind six flushes at once.
func dbOptions(o Options) *opt.Options {
	wb := max(opt.DefaultWriteBuffer, 2*o.MaxBatchBytes)
	return &opt.Options{
		Strict: opt.StrictManifest | opt.StrictJournalChecksum | opt.StrictBlockChecksum |
			opt.StrictCompaction | opt.StrictReader,
		Filter:         filter.NewBloomFilter(10),
		ErrorIfMissing: false,
		WriteBuffer:    wb + rand.IntN(wb/4+1),
	}
}

// Open opens (or creates) the LevelDB slot store in dir. A new or wiped
// directory gets a new Incarnation, written with Sync before Open returns.
// A damaged database is an error wrapping ErrCorrupt that names dir.
func Open(dir string, opts Options) (Store, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("slotstore: %s: open: %w", dir, err)
	}
	if err := checkJournals(dir); err != nil {
		return nil, err
	}
	db, ls, err := openDB(dir, opts)
	if err != nil {
		return nil, err
	}
	stor, _ := ls.Storage.(*preallocStorage)
	inc, created, err := loadIncarnation(db, dir, opts.Now)
	if err != nil {
		db.Close()
		ls.Close()
		return nil, err
	}
	s := &levelStore{dir: dir, db: db, stor: stor, ls: ls, opts: opts, inc: inc, wo: &opt.WriteOptions{Sync: !opts.NoSync}}
	s.c = newCommitter(s, opts)
	opts.Logger.Info("slotstore: opened", "dir", dir, "incarnation", inc, "new", created, "fsync", !opts.NoSync)
	if opts.NoSync {
		opts.Logger.Warn("slotstore: --no-fsync: commits are NOT fsynced; a power loss can lose acknowledged writes", "dir", dir)
	}
	return s, nil
}

// openDB opens the LevelDB, turning corruption (and any panic) into an error.
// With fsync on, the DB runs over a preallocStorage (pre-zeroed journals,
// see prealloc.go); either way over a logStorage (leveldb_log.go), which
// the caller closes after the DB.
func openDB(dir string, o Options) (db *leveldb.DB, ls *logStorage, err error) {
	defer func() {
		if r := recover(); r != nil {
			if ls != nil {
				ls.Close()
			}
			db, ls, err = nil, nil, fmt.Errorf("slotstore: %s: open: %w: leveldb panicked: %v", dir, ErrCorrupt, r)
		}
	}()
	dbo := dbOptions(o)
	var inner storage.Storage
	if o.NoSync {
		inner, err = storage.OpenFile(dir, false)
	} else {
		inner, err = newPreallocStorage(dir, spareBytes(dbo), o.Logger)
	}
	if err != nil {
		return nil, nil, wrapDB(dir, "open", err)
	}
	ls = &logStorage{Storage: inner, dir: dir, log: o.Logger}
	db, err = leveldb.Open(ls, dbo)
	if err != nil {
		ls.Close()
		ls = nil
	}
	if lerrors.IsCorrupted(err) {
		return nil, nil, fmt.Errorf("%w (salvage it with leveldb.RecoverFile, or wipe the directory: "+
			"the node then starts a new incarnation that repair refills)", wrapDB(dir, "open", err))
	}
	if err != nil {
		return nil, nil, wrapDB(dir, "open", err)
	}
	return db, ls, nil
}

// spareBytes sizes a journal spare: a journal holds one write buffer of
// batches plus framing; 1 MiB of slack keeps the last group inside it.
func spareBytes(o *opt.Options) int64 { return int64(o.WriteBuffer) + int64(o.WriteBuffer)/8 + 1<<20 }

// wrapDB maps a LevelDB error to the package's sentinels, with context.
func wrapDB(dir, op string, err error) error {
	switch {
	case errors.Is(err, leveldb.ErrNotFound):
		return fmt.Errorf("slotstore: %s: %w", op, ErrNotFound)
	case errors.Is(err, leveldb.ErrClosed):
		return fmt.Errorf("slotstore: %s: %w", op, ErrClosed)
	case lerrors.IsCorrupted(err):
		return fmt.Errorf("slotstore: %s: %s: %w: %w", dir, op, ErrCorrupt, err)
	}
	return fmt.Errorf("slotstore: %s: %s: %w", dir, op, err)
}

func (s *levelStore) Commit(b *Batch, done func(error)) { s.c.commit(b, done) }

func (s *levelStore) Get(k Key) ([]byte, error) {
	op := "get " + k.String()
	if err := ValidateTopic(k.Topic); err != nil {
		return nil, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if err := s.gate.enter(); err != nil {
		return nil, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer s.gate.leave()
	v, err := s.db.Get(slotKey(k), nil)
	if err != nil {
		return nil, wrapDB(s.dir, op, err)
	}
	return verifyShard(op, v)
}

func (s *levelStore) Scan(topic string, partition uint32, from, to uint64, fn func(uint64, []byte) bool) error {
	op := fmt.Sprintf("scan topic %q partition %d [%d, %d)", topic, partition, from, to)
	if err := ValidateTopic(topic); err != nil {
		return fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if from >= to {
		return nil
	}
	if err := s.gate.enter(); err != nil {
		return fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer s.gate.leave()
	prefix := partPrefix(tagSlot, topic, partition)
	it := s.db.NewIterator(&util.Range{Start: withOffset(prefix, from), Limit: withOffset(prefix, to)}, nil)
	defer it.Release()
	for it.Next() {
		if !fn(keyOffset(it.Key()), it.Value()) {
			break
		}
	}
	if err := it.Error(); err != nil {
		return wrapDB(s.dir, op, err)
	}
	return nil
}

func (s *levelStore) Seal(topic string, partition uint32, rangeStart uint64) (uint64, error) {
	op := fmt.Sprintf("seal of topic %q partition %d range %d", topic, partition, rangeStart)
	if err := ValidateTopic(topic); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if err := s.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer s.gate.leave()
	seal, _, err := s.readSeal(op, sealKey(topic, partition, rangeStart))
	return seal, err
}

// readSeal returns a stored seal value and whether there is one.
func (s *levelStore) readSeal(op string, enc []byte) (uint64, bool, error) {
	v, err := s.db.Get(enc, nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, wrapDB(s.dir, op, err)
	}
	seal, err := decodeSeal(v)
	if err != nil {
		return 0, false, fmt.Errorf("slotstore: %s: %s: %w", s.dir, op, err)
	}
	return seal, true, nil
}

func (s *levelStore) DropBefore(topic string, partition uint32, before uint64) (int, error) {
	op := fmt.Sprintf("drop topic %q partition %d before %d", topic, partition, before)
	if err := ValidateTopic(topic); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	if err := s.c.failure(); err != nil {
		return 0, err
	}
	if err := s.gate.enter(); err != nil {
		return 0, fmt.Errorf("slotstore: %s: %w", op, err)
	}
	defer s.gate.leave()
	n, err := s.dropRange(op, partPrefix(tagSlot, topic, partition), before)
	if err != nil {
		return n, err
	}
	if _, err = s.dropRange(op, partPrefix(tagSeal, topic, partition), before); err != nil {
		return n, err
	}
	_, err = s.dropRange(op, partPrefix(tagHole, topic, partition), before)
	return n, err
}

// dropRange deletes the keys prefix|[0, before) in chunks, then compacts
// the range so that DiskBytes (size-based retention) sees the space freed.
func (s *levelStore) dropRange(op string, prefix []byte, before uint64) (int, error) {
	r := util.Range{Start: withOffset(prefix, 0), Limit: withOffset(prefix, before)}
	it := s.db.NewIterator(&r, &opt.ReadOptions{DontFillCache: true})
	defer it.Release()
	var wb leveldb.Batch
	n := 0
	flush := func() error {
		if err := s.db.Write(&wb, nil); err != nil {
			return wrapDB(s.dir, op, err)
		}
		n += wb.Len()
		wb.Reset()
		return nil
	}
	for it.Next() {
		wb.Delete(it.Key())
		if wb.Len() >= dropChunk {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := it.Error(); err != nil {
		return n, wrapDB(s.dir, op, err)
	}
	if err := flush(); err != nil || n == 0 {
		return n, err
	}
	if err := s.db.CompactRange(r); err != nil {
		return n, wrapDB(s.dir, op+": compact", err)
	}
	return n, nil
}

func (s *levelStore) Incarnation() Incarnation {
	s.incM.Lock()
	defer s.incM.Unlock()
	return s.inc
}

func (s *levelStore) SettleBirth(birth uint64) (Incarnation, error) {
	if err := s.gate.enter(); err != nil {
		return s.Incarnation(), fmt.Errorf("slotstore: settle birth: %w", err)
	}
	defer s.gate.leave()
	s.incM.Lock()
	defer s.incM.Unlock()
	inc, err := settleBirth(s.db, s.dir, s.inc, birth)
	if err == nil && inc != s.inc {
		s.opts.Logger.Info("slotstore: incarnation birth settled", "dir", s.dir, "incarnation", inc, "was", s.inc)
	}
	s.inc = inc
	return inc, err
}

// DiskBytes sums the sizes of the files in the data directory.
func (s *levelStore) DiskBytes() int64 {
	var total int64
	filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // files come and go under compaction: count what is there
		}
		if s.stor != nil {
			if n, ok := s.stor.dataBytes(path); ok { // preallocated zeros are not data
				total += n
				return nil
			}
		}
		if info, err := d.Info(); err == nil {
			total += info.Size()
		}
		return nil
	})
	return total
}

func (s *levelStore) Close() error {
	s.c.stop(stateClosing)
	if !s.gate.close() {
		return nil
	}
	err := s.db.Close()
	if serr := s.ls.Close(); err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("slotstore: close %s: %w", s.dir, err)
	}
	s.opts.Logger.Info("slotstore: closed", "dir", s.dir)
	return nil
}

// lookup implements backend.
func (s *levelStore) lookup(_ Key, enc []byte) ([]byte, bool, error) {
	v, err := s.db.Get(enc, nil)
	switch {
	case err == nil:
		return v, true, nil
	case errors.Is(err, leveldb.ErrNotFound):
		return nil, false, nil
	}
	return nil, false, wrapDB(s.dir, "read", err)
}

// write implements backend: one LevelDB batch, synced unless NoSync.
func (s *levelStore) write(items []*item) error {
	wb := &s.wb
	defer wb.Reset()
	var seals map[string]uint64 // seals raised earlier in this group
	for _, it := range items {
		for _, p := range it.puts {
			wb.Put(p.enc, p.shard)
		}
		for _, sl := range it.seals {
			if seals == nil {
				seals = make(map[string]uint64)
			}
			if err := s.raiseSeal(wb, seals, sl); err != nil {
				return err
			}
		}
		if len(it.metas) > 0 {
			if seals == nil {
				seals = make(map[string]uint64)
			}
			if err := s.writeMetas(wb, seals, it.metas); err != nil {
				return err
			}
		}
	}
	if wb.Len() == 0 {
		return nil
	}
	if err := s.db.Write(wb, s.wo); err != nil {
		return wrapDB(s.dir, "write", err)
	}
	return nil
}

// raiseSeal puts sl into wb unless the stored (or earlier) seal is higher.
func (s *levelStore) raiseSeal(wb *leveldb.Batch, seals map[string]uint64, sl sealSet) error {
	cur, ok := seals[string(sl.enc)]
	if !ok {
		var err error
		if cur, ok, err = s.readSeal("raise seal", sl.enc); err != nil {
			return err
		}
	}
	if ok && sl.seal <= cur {
		return nil
	}
	seals[string(sl.enc)] = sl.seal
	wb.Put(sl.enc, binary.BigEndian.AppendUint64(nil, sl.seal))
	return nil
}

// BackgroundErrors implements BackgroundErrorer.
func (s *levelStore) BackgroundErrors() (int64, string) { return s.ls.backgroundErrors() }
