package slotstore

import "testing"

// TestApproxBytes: exact for MemStore; for LevelDB it counts table files,
// so it sees data once it is flushed (here: by a reopen), compressed.
func TestApproxBytes(t *testing.T) {
	m := NewMem(quiet())
	defer m.Close()
	for i := range uint64(10) {
		put(t, m, Key{"a", 0, i * 100}, testShard(t, i*100, i, 1000))
	}
	one := int64(len(testShard(t, 0, 0, 1000)))
	if n, err := m.ApproxBytes("a", 0, 0, 500); err != nil || n != 5*one {
		t.Fatalf("mem: %d, %v; want %d", n, err, 5*one)
	}

	dir := t.TempDir()
	s, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(200) {
		put(t, s, Key{"a", 0, i * 100}, testShard(t, i*100, i, 4000))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, quiet())
	all, err := s.ApproxBytes("a", 0, 0, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	half, _ := s.ApproxBytes("a", 0, 0, 100*100)
	other, _ := s.ApproxBytes("b", 0, 0, 1<<40)
	if all < 10000 || half > all || half < all/4 || other != 0 {
		t.Fatalf("leveldb sizes: all %d half %d other %d", all, half, other)
	}
}
