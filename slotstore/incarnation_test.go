package slotstore

import "testing"

// TestSettleBirth: a new directory's incarnation is provisional, across
// reopens, until SettleBirth; settling raises the birth only while the
// store holds nothing, is durable, and happens once.
func TestSettleBirth(t *testing.T) {
	dir := t.TempDir()
	o := quiet()
	o.Now = func() uint64 { return 1000 }
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if inc := s.Incarnation(); !inc.Provisional || inc.Birth != 1000 {
		t.Fatalf("new incarnation %+v: want provisional, born at 1000", inc)
	}
	s.Close()
	s = openT(t, dir, o)
	inc := s.Incarnation()
	if !inc.Provisional {
		t.Fatal("a reopen settled the birth")
	}
	if got, err := s.SettleBirth(500); err != nil || got.Birth != 1000 || got.Provisional || got.ID != inc.ID {
		t.Fatalf("settle below the birth: %+v, %v; want born at 1000, settled", got, err)
	}
	if got, _ := s.SettleBirth(9000); got.Birth != 1000 {
		t.Fatalf("a settled birth moved: %+v", got)
	}
	s.Close()
	s = openT(t, dir, o)
	if got := s.Incarnation(); got.Provisional || got.Birth != 1000 {
		t.Fatalf("after reopen: %+v, want settled at 1000", got)
	}

	empty := openT(t, t.TempDir(), o)
	if got, err := empty.SettleBirth(7000); err != nil || got.Birth != 7000 || got != empty.Incarnation() {
		t.Fatalf("settle an empty store at 7000: %+v, %v", got, err)
	}

	// A provisional store that already holds a slot keeps its birth.
	full := openT(t, t.TempDir(), o)
	put(t, full, Key{"a", 1, 1}, testShard(t, 1, 1, 64))
	if got, err := full.SettleBirth(7000); err != nil || got.Birth != 1000 || got.Provisional {
		t.Fatalf("settle a store holding a slot: %+v, %v; want born at 1000, settled", got, err)
	}
}
