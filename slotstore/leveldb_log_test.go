package slotstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/syndtr/goleveldb/leveldb/storage"
)

// TestLevelDBBackgroundErrorsLogged: a failed flush, which LevelDB only
// writes to its own LOG file, reaches the node's logger at Error and the
// store's counters; ordinary lines and a skipped torn journal tail do not.
func TestLevelDBBackgroundErrorsLogged(t *testing.T) {
	var buf bytes.Buffer
	ls := &logStorage{Storage: storage.NewMemStorage(), dir: "d", log: slog.New(slog.NewTextHandler(&buf, nil))}
	defer ls.Close()
	ls.Log("memdb@flush committed F·1 T·1.2ms")
	ls.Log(`journal error: leveldb/journal: block/chunk corrupted (skipped)`)
	if n, last := ls.backgroundErrors(); n != 0 || last != "" || buf.Len() != 0 {
		t.Fatalf("ordinary lines counted: %d %q\n%s", n, last, buf.String())
	}
	line := `memdb@flush error I·3 "write /d/000012.ldb: no space left on device"`
	ls.Log(line)
	ls.Log(`table@compaction exiting (persistent error "read-only")`)
	n, last := ls.backgroundErrors()
	if n != 2 || !strings.Contains(last, "persistent error") {
		t.Errorf("counted %d, last %q", n, last)
	}
	if out := buf.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "no space left on device") {
		t.Errorf("log:\n%s", out)
	}
}

// TestLevelDBStoreReportsBackgroundErrors: the LevelDB Store is a
// BackgroundErrorer, with or without fsync.
func TestLevelDBStoreReportsBackgroundErrors(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		s, err := Open(t.TempDir(), Options{NoSync: noSync, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		be, ok := s.(BackgroundErrorer)
		if !ok {
			t.Fatal("the LevelDB store is not a BackgroundErrorer")
		}
		if n, _ := be.BackgroundErrors(); n != 0 {
			t.Errorf("fresh store: %d background errors", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
