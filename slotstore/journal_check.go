package slotstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/syndtr/goleveldb/leveldb/journal"
)

// checkJournals reads every LevelDB journal (*.log) in dir before the
// database opens and refuses one that is damaged anywhere but at its tail.
//
// Why: Open leaves out opt.StrictJournal so that the torn last record an
// ordinary power loss or crash leaves (never acknowledged: its fsync did
// not return) is dropped and the node starts. But goleveldb's lenient
// replay drops damaged chunks anywhere in the journal, and a record in the
// middle was acknowledged: the node would then answer "empty" for slots it
// had acked, mistaking "lost" for "never written" (DESIGN §4). A journal
// is damaged "at its tail" when no intact record follows the first
// damaged chunk; anything else is ErrCorrupt, and the operator moves the
// directory aside so the node starts a new incarnation that repair refills.
func checkJournals(dir string) error {
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return err
	}
	sort.Strings(logs)
	for _, path := range logs {
		if err := checkJournal(path); err != nil {
			return err
		}
	}
	return nil
}

// journalDrops records what the journal reader dropped.
type journalDrops struct {
	n     int
	first error
}

func (d *journalDrops) Drop(err error) {
	if d.n == 0 {
		d.first = err
	}
	d.n++
}

// checkJournal reads one journal; see checkJournals.
func checkJournal(path string) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // removed meanwhile (an obsolete journal)
		}
		return fmt.Errorf("slotstore: read journal %s: %w", path, err)
	}
	defer f.Close()
	drops := &journalDrops{}
	r := journal.NewReader(f, drops, false, true)
	records, afterDrop := 0, 0
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if err != nil && err != io.ErrUnexpectedEOF {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("slotstore: read journal %s: %w", path, err)
		}
		if err == io.ErrUnexpectedEOF { // a record cut short: the reader moves on
			continue
		}
		records++
		if drops.n > 0 {
			afterDrop++
		}
	}
	if afterDrop > 0 {
		return fmt.Errorf("slotstore: %s: %w: journal damaged before its end (%d damaged chunks, first: %v; %d intact records after it): "+
			"acknowledged writes in it would be lost; move the slot directory aside and start the node again: it starts "+
			"a new incarnation that repair refills from the other nodes", path, ErrCorrupt, drops.n, drops.first, afterDrop)
	}
	return nil
}
