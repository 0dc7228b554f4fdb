package slotstore

import "testing"

// TestMarksAndHoles: marks only rise; holes are listed by range and
// dropped with the slots.
func TestMarksAndHoles(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		raise := func(kind MarkKind, topic string, p uint32, v uint64) {
			t.Helper()
			var b Batch
			b.RaiseMark(kind, topic, p, v)
			if err := commit(s, &b); err != nil {
				t.Fatal(err)
			}
		}
		raise(MarkRepaired, "a", 1, 100)
		raise(MarkRepaired, "a", 1, 50) // ignored
		raise(MarkDropped, "a", 1, 7)
		raise(MarkRepaired, "ab", 1, 999)
		for _, c := range []struct {
			kind  MarkKind
			topic string
			p     uint32
			want  uint64
		}{{MarkRepaired, "a", 1, 100}, {MarkDropped, "a", 1, 7}, {MarkRepaired, "ab", 1, 999}, {MarkRepaired, "a", 0, 0}, {MarkDropped, "ab", 1, 0}} {
			if got, err := s.Mark(c.kind, c.topic, c.p); err != nil || got != c.want {
				t.Errorf("mark %s %s/%d = %d, %v; want %d", c.kind, c.topic, c.p, got, err, c.want)
			}
		}
		var b Batch
		for _, off := range []uint64{30, 10, 20} {
			b.PutHole("a", 1, off)
		}
		b.PutHole("a", 2, 15)
		b.PutSlot(Key{"a", 1, 5}, testShard(t, 5, 1, 16))
		if err := commit(s, &b); err != nil {
			t.Fatal(err)
		}
		if h, err := s.Holes("a", 1, 0, 100); err != nil || len(h) != 3 || h[0] != 10 || h[2] != 30 {
			t.Fatalf("holes %v, %v", h, err)
		}
		if h, _ := s.Holes("a", 1, 11, 30); len(h) != 1 || h[0] != 20 {
			t.Fatalf("holes in [11,30): %v", h)
		}
		if n, err := s.DropBefore("a", 1, 21); err != nil || n != 1 {
			t.Fatalf("drop: %d, %v", n, err)
		}
		if h, _ := s.Holes("a", 1, 0, 100); len(h) != 1 || h[0] != 30 {
			t.Fatalf("holes after drop: %v", h)
		}
		if h, _ := s.Holes("a", 2, 0, 100); len(h) != 1 {
			t.Fatalf("another partition's holes dropped: %v", h)
		}
		if m, _ := s.Mark(MarkRepaired, "a", 1); m != 100 {
			t.Fatalf("drop changed a mark: %d", m)
		}
	})
}

// TestMarksDurable: marks and holes survive a reopen and a MemStore crash.
func TestMarksDurable(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.RaiseMark(MarkRepaired, "a", 3, 42)
	b.PutHole("a", 3, 41)
	if err := commit(s, &b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, quiet())
	if m, _ := s.Mark(MarkRepaired, "a", 3); m != 42 {
		t.Fatalf("mark after reopen: %d", m)
	}
	if h, _ := s.Holes("a", 3, 0, 100); len(h) != 1 || h[0] != 41 {
		t.Fatalf("holes after reopen: %v", h)
	}

	m := NewMem(quiet())
	if err := commit(m, &b); err != nil {
		t.Fatal(err)
	}
	m2 := m.Crash()
	defer m2.Close()
	if v, _ := m2.Mark(MarkRepaired, "a", 3); v != 42 {
		t.Fatalf("mark after crash: %d", v)
	}
	if h, _ := m2.Holes("a", 3, 0, 100); len(h) != 1 {
		t.Fatalf("holes after crash: %v", h)
	}
}
