package meta

import (
	"errors"
	"fmt"
	"testing"

	"github.com/raidq/raidq/stripe/quorum"
)

// gridRecord is a valid topic record with the given grid field ("" for none).
func gridRecord(grid string) []byte {
	return []byte(`{"name":"x","partitions":1,"n":6,"k":4,"w":4,"read_delay":"250ms","accept_window":"250ms",` +
		`"future_bound":"250ms","max_skew":"250ms","ensembles":[["a","b","c","d","e","f"]]` + grid + `}`)
}

// TestTopicGridDecodes: the grid reaches the topic's params; a record
// without it (written before the grid existed) is a topic without grid.
func TestTopicGridDecodes(t *testing.T) {
	old, err := DecodeTopic(gridRecord(""))
	if err != nil || old.Grid != 0 || old.Params().Gridded() || old.Topic().Params.Grid != 0 {
		t.Fatalf("old record: grid %d, %v", old.Grid, err)
	}
	r, err := DecodeTopic(gridRecord(`,"grid":1024`))
	if err != nil || r.Params() != quorum.Default() || r.Topic().Params.Grid != quorum.DefaultGrid {
		t.Fatalf("gridded record: %+v, %v", r.Params(), err)
	}
}

// TestTopicGridValidated: a grid that is not a power of two, or beyond
// MaxGrid, is a bad record.
func TestTopicGridValidated(t *testing.T) {
	for _, g := range []string{"1000", "3", fmt.Sprint(quorum.MaxGrid * 2), "-1", `"1024"`} {
		if _, err := DecodeTopic(gridRecord(`,"grid":` + g)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("grid %s: want ErrBadRecord, got %v", g, err)
		}
	}
	for _, g := range []string{"0", "1", "2", fmt.Sprint(quorum.MaxGrid)} {
		if _, err := DecodeTopic(gridRecord(`,"grid":` + g)); err != nil {
			t.Errorf("grid %s refused: %v", g, err)
		}
	}
}
