package slotstore

import (
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/syndtr/goleveldb/leveldb/storage"
)

// BackgroundErrorer is implemented by stores whose database fails work in
// the background (a LevelDB memtable flush or compaction): the node reports
// the count and the last error in its status (the LevelDB Store does).
type BackgroundErrorer interface {
	// BackgroundErrors returns how many background errors the store has
	// logged since it opened, and the last one ("" if none).
	BackgroundErrors() (int64, string)
}

// logStorage passes LevelDB's own log (storage.Log, its LOG file) on, and
// sends the lines that report a failed flush or compaction to the node's
// logger at Error as well: LevelDB retries those quietly, and a full disk
// otherwise shows nowhere an operator looks until a write fails.
type logStorage struct {
	storage.Storage
	dir  string
	log  *slog.Logger
	errs atomic.Int64
	last atomic.Pointer[string]
}

// Log implements storage.Storage.
func (l *logStorage) Log(str string) {
	l.Storage.Log(str)
	if !backgroundError(str) {
		return
	}
	l.errs.Add(1)
	l.last.Store(&str)
	l.log.Error("slotstore: LevelDB background work failed (flush or compaction); it retries, and writes fail while it cannot",
		"dir", l.dir, "detail", str, "count", l.errs.Load())
}

// backgroundError: a LevelDB log line that reports a failed flush,
// compaction or commit ("memdb@flush error I·3 ...", "table@compaction
// exiting (persistent error ...)"); not the torn journal tail skipped at
// recovery, which is normal after a crash.
func backgroundError(line string) bool {
	return strings.Contains(line, " error I·") || strings.Contains(line, "persistent error") ||
		strings.Contains(line, "@commit error") || strings.Contains(line, " revert error ")
}

// backgroundErrors reads the counters (nil storage: none).
func (l *logStorage) backgroundErrors() (int64, string) {
	if l == nil {
		return 0, ""
	}
	last := ""
	if p := l.last.Load(); p != nil {
		last = *p
	}
	return l.errs.Load(), last
}
