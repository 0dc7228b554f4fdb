package placement

import (
	"fmt"
	"hash/fnv"
	"testing"
)

// The score must stay byte-for-byte what the earlier, separate
// implementations hashed ("%s/%d/%s" for ensembles, "%s/%s/%d/%s" for
// groups), or members on mixed versions would disagree.
func TestScoreKeepsFormats(t *testing.T) {
	old := func(format string, args ...any) uint64 {
		h := fnv.New64a()
		fmt.Fprintf(h, format, args...)
		return h.Sum64()
	}
	if got, want := Score("orders/3", "n2"), old("%s/%d/%s", "orders", 3, "n2"); got != want {
		t.Fatalf("ensemble score %x, want %x", got, want)
	}
	if got, want := Score("g/orders/3", "m1"), old("%s/%s/%d/%s", "g", "orders", 3, "m1"); got != want {
		t.Fatalf("group score %x, want %x", got, want)
	}
}

func TestRankAndWinnerAgree(t *testing.T) {
	ids := []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"}
	for p := 0; p < 64; p++ {
		prefix := fmt.Sprintf("t/%d", p)
		r := Rank(prefix, ids)
		if len(r) != len(ids) {
			t.Fatalf("rank lost ids: %v", r)
		}
		if w := Winner(prefix, ids); w != r[0] {
			t.Fatalf("prefix %s: winner %s, rank %v", prefix, w, r)
		}
		for i := 1; i < len(r); i++ {
			if Score(prefix, r[i-1]) < Score(prefix, r[i]) {
				t.Fatalf("prefix %s: rank not descending: %v", prefix, r)
			}
		}
	}
	if Winner("x", nil) != "" || len(Rank("x", nil)) != 0 {
		t.Fatal("empty candidates")
	}
}
