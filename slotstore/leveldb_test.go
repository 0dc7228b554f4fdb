package slotstore

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/util"
)

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	o := quiet()
	o.Now = func() uint64 { return 12345 }
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	inc := s.Incarnation()
	if inc.Birth != 12345 || inc.ID == ([16]byte{}) {
		t.Fatalf("incarnation %v: want birth from Options.Now and a random id", inc)
	}
	const n = 500
	want := map[Key][]byte{}
	var log doneLog
	var wantSeal uint64 // of a/0: the last offset written there
	for i := range n {
		k := Key{[]string{"a", "ab", "b"}[i%3], uint32(i % 4), uint64(i) * 1e6}
		if k.Topic == "a" && k.Partition == 0 {
			wantSeal = k.Offset
		}
		want[k] = testShard(t, k.Offset, uint64(i), 1+i%300)
		var b Batch
		b.PutSlot(k, want[k])
		b.SetSeal(k.Topic, k.Partition, 0, k.Offset)
		s.Commit(&b, log.done(i))
	}
	log.wg.Wait()
	for _, err := range log.errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s.DiskBytes() <= 0 {
		t.Fatal("DiskBytes is 0 after writes")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	o.Now = func() uint64 { return 99999 } // must not matter on reopen
	s = openT(t, dir, o)
	if s.Incarnation() != inc {
		t.Fatalf("incarnation %v after reopen, want %v", s.Incarnation(), inc)
	}
	for k, v := range want {
		if got, err := s.Get(k); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("after reopen %s: %v", k, err)
		}
	}
	if seal, _ := s.Seal("a", 0, 0); seal != wantSeal {
		t.Fatalf("seal a/0 %d after reopen, want %d", seal, wantSeal)
	}
	if other := openT(t, t.TempDir(), o); other.Incarnation().ID == inc.ID {
		t.Fatal("two data directories share an incarnation id")
	}
}

// TestReopenAfterCompaction pushes enough data through to flush tables,
// drops most of it (DropBefore compacts the range), then reopens.
func TestReopenAfterCompaction(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, quiet())
	var b Batch
	for i := range 3000 {
		b.PutSlot(Key{"a", 1, uint64(i)}, testShard(t, uint64(i), 1, 4096))
	}
	if err := commit(s, &b); err != nil {
		t.Fatal(err)
	}
	before := s.DiskBytes()
	if n, err := s.DropBefore("a", 1, 2900); n != 2900 || err != nil {
		t.Fatalf("drop: %d, %v", n, err)
	}
	if after := s.DiskBytes(); after >= before {
		t.Fatalf("DiskBytes %d after dropping 97%%, was %d", after, before)
	}
	s.Close()
	s = openT(t, dir, quiet())
	if got := scanAll(t, s, "a", 1, 0, math.MaxUint64); len(got) != 100 || got[0].off != 2900 {
		t.Fatalf("after reopen: %d slots", len(got))
	}
}

// logBuf is a slog handler target safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestNoSync(t *testing.T) {
	var logs logBuf
	dir := t.TempDir()
	o := Options{NoSync: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "no-fsync") || !strings.Contains(logs.String(), "fsync=false") {
		t.Fatalf("--no-fsync mode not logged:\n%s", logs.String())
	}
	k := Key{"a", 1, 1}
	put(t, s, k, testShard(t, 1, 1, 8))
	s.Close()
	s = openT(t, dir, quiet())
	if _, err := s.Get(k); err != nil {
		t.Fatalf("NoSync write lost across a clean close: %v", err)
	}
}

// seed writes a few slots and closes, twice, so that the directory holds a
// MANIFEST, a journal and at least one .ldb table.
func seed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for i := range 2 {
		s, err := Open(dir, quiet())
		if err != nil {
			t.Fatal(err)
		}
		put(t, s, Key{"a", 1, uint64(i)}, testShard(t, uint64(i), 1, 64))
		s.Close()
	}
	return dir
}

func overwrite(t *testing.T, dir, glob string, garbage []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, glob))
	if len(files) == 0 {
		t.Fatalf("no %s in %s", glob, dir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(garbage) == 0 { // flip bytes in place: same size, bad checksums
			for i := range b {
				b[i] ^= 0x5a
			}
		} else {
			b = garbage
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenCorrupt(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, dir string){
		"CURRENT garbage":  func(t *testing.T, dir string) { overwrite(t, dir, "CURRENT", []byte("garbage\n")) },
		"CURRENT missing":  func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "CURRENT")) },
		"MANIFEST garbage": func(t *testing.T, dir string) { overwrite(t, dir, "MANIFEST-*", bytes.Repeat([]byte("junk"), 100)) },
		"MANIFEST flipped": func(t *testing.T, dir string) { overwrite(t, dir, "MANIFEST-*", nil) },
		"tables flipped":   func(t *testing.T, dir string) { overwrite(t, dir, "*.ldb", nil) },
		"tables garbage":   func(t *testing.T, dir string) { overwrite(t, dir, "*.ldb", bytes.Repeat([]byte{7}, 4096)) },
		"no incarnation": func(t *testing.T, dir string) {
			rawDB(t, dir, func(db *leveldb.DB) { db.Delete(metaIncarnation, nil) })
		},
		"bad incarnation": func(t *testing.T, dir string) {
			rawDB(t, dir, func(db *leveldb.DB) { db.Put(metaIncarnation, []byte("short"), nil) })
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := seed(t)
			damage(t, dir)
			s, err := Open(dir, quiet())
			if err == nil {
				s.Close()
				t.Fatal("Open of a damaged directory succeeded")
			}
			wantErr(t, err, ErrCorrupt)
			t.Log(err)
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error does not name the directory: %v", err)
			}
		})
	}
}

func rawDB(t *testing.T, dir string, f func(db *leveldb.DB)) {
	t.Helper()
	db, err := leveldb.OpenFile(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	f(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptTableRead damages a table that does not hold the incarnation:
// Open succeeds, and reading the damaged slots reports ErrCorrupt.
func TestCorruptTableRead(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rawDB(t, dir, func(db *leveldb.DB) { db.CompactRange(util.Range{}) }) // incarnation into its own table
	before, _ := filepath.Glob(filepath.Join(dir, "*.ldb"))
	s, err = Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, Key{"a", 1, 1}, testShard(t, 1, 1, 64))
	s.Close()
	s, _ = Open(dir, quiet()) // the journal is flushed into a new table on open
	s.Close()
	after, _ := filepath.Glob(filepath.Join(dir, "*.ldb"))
	var fresh []string
	for _, f := range after {
		if !contains(before, f) {
			fresh = append(fresh, f)
		}
	}
	if len(fresh) == 0 {
		t.Skip("no new table file to damage")
	}
	for _, f := range fresh {
		b, _ := os.ReadFile(f)
		for i := range b {
			b[i] ^= 0x5a
		}
		os.WriteFile(f, b, 0o644)
	}
	s, err = Open(dir, quiet())
	if err != nil {
		t.Fatalf("Open read the damaged table: %v", err)
	}
	defer s.Close()
	_, err = s.Get(Key{"a", 1, 1})
	wantErr(t, err, ErrCorrupt)
	t.Log(err)
	wantErr(t, s.Scan("a", 1, 0, 10, func(uint64, []byte) bool { return true }), ErrCorrupt)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestTornJournalTail: a power loss mid-write leaves a torn last journal
// record. That write was never acknowledged, so the store must open and
// lose just it (this is why Open does not use opt.StrictJournal).
func TestTornJournalTail(t *testing.T) {
	dir := t.TempDir()
	a, b := Key{"a", 1, 1}, Key{"a", 1, 2}
	s, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, a, testShard(t, 1, 1, 64))
	s.Close()
	s, err = Open(dir, quiet()) // replays the journal into a table
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, b, testShard(t, 2, 1, 4096))
	s.Close()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		t.Fatal("no journal")
	}
	newest := logs[len(logs)-1]
	info, err := os.Stat(newest)
	if err != nil || info.Size() < 1000 {
		t.Fatalf("journal %s: %v, %d bytes", newest, err, info.Size())
	}
	if err := os.Truncate(newest, info.Size()-100); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, quiet())
	if _, err := s.Get(a); err != nil {
		t.Fatalf("write before the torn one: %v", err)
	}
	_, err = s.Get(b)
	wantErr(t, err, ErrNotFound)
}

// TestJournalDamagedMidway: damage in the middle of the journal (acked
// records follow it) is refused with ErrCorrupt rather than silently
// dropped, so the node never answers "empty" for a slot it acknowledged.
func TestJournalDamagedMidway(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		put(t, s, Key{"a", 1, uint64(i + 1)}, testShard(t, uint64(i+1), 1, 4096))
	}
	s.Close()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		t.Fatal("no journal")
	}
	newest := logs[len(logs)-1]
	b, err := os.ReadFile(newest)
	if err != nil || len(b) < 100_000 {
		t.Fatalf("journal %s: %v, %d bytes", newest, err, len(b))
	}
	for i := range 4 {
		b[len(b)/3+i*7] ^= 0x5a
	}
	if err := os.WriteFile(newest, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, quiet())
	wantErr(t, err, ErrCorrupt)
	if !strings.Contains(err.Error(), "journal damaged before its end") {
		t.Fatalf("error does not say where the damage is: %v", err)
	}
}
