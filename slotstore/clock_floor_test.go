package slotstore

import "testing"

// TestClockFloor: the floor only rises and survives a reopen and a crash.
func TestClockFloor(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, quiet())
	for _, v := range []uint64{50, 40} { // 40: lower, ignored
		var b Batch
		b.RaiseClockFloor(v)
		if err := commit(s, &b); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := s.ClockFloor(); err != nil || v != 50 {
		t.Fatalf("floor = %d, %v; want 50", v, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, quiet())
	if v, _ := s.ClockFloor(); v != 50 {
		t.Fatalf("floor after reopen = %d", v)
	}

	m := NewMem(quiet())
	var b Batch
	b.RaiseClockFloor(77)
	if err := commit(m, &b); err != nil {
		t.Fatal(err)
	}
	m2 := m.Crash()
	defer m2.Close()
	if v, _ := m2.ClockFloor(); v != 77 {
		t.Fatalf("floor after crash = %d", v)
	}
}
