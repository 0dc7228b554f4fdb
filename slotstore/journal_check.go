package slotstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// checkJournals reads every LevelDB journal (*.log) in dir before the
// database opens and refuses one that is damaged anywhere but at its tail.
//
// Why: Open leaves out opt.StrictJournal so that the torn last record an
// ordinary power loss or crash leaves (never acknowledged: its fsync did
// not return) is dropped and the node starts. But goleveldb's lenient
// replay drops damaged chunks anywhere in the journal, and a record in the
// middle was acknowledged: the node would then answer "empty" for slots it
// had acked, mistaking "lost" for "never written" (docs/design.md#slot-store). A journal
// is damaged "at its tail" when no intact record follows the first
// damaged chunk, in the same block included (scanJournal parses the format
// itself: goleveldb's reader drops the rest of a damaged block, which hid
// damage in a journal's last block); anything else is ErrCorrupt, and the
// operator moves the directory aside so the node starts a new incarnation
// that repair refills.
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

// checkJournal scans one journal (scanJournal); see checkJournals.
func checkJournal(path string) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // removed meanwhile (an obsolete journal)
		}
		return fmt.Errorf("slotstore: read journal %s: %w", path, err)
	}
	defer f.Close()
	s, err := scanJournal(f)
	if err != nil {
		return fmt.Errorf("slotstore: read journal %s: %w", path, err)
	}
	if s.Refused() {
		return fmt.Errorf("slotstore: %s: %w: journal damaged before its end: at offset %d (%s), with %d intact records after it "+
			"(the first at offset %d): acknowledged writes in it would be lost; move the slot directory aside and start the node "+
			"again: it starts a new incarnation that repair refills from the other nodes", path, ErrCorrupt, s.At, s.Reason, s.Intact, s.IntactAt)
	}
	return nil
}
