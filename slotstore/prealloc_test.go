package slotstore

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestPreallocJournalCrash: the journal in use is a pre-zeroed spare; a
// copy of the directory taken while the store is open (what a crash
// leaves: records, then zeros) opens with every acknowledged write, and
// the zero tail is not mistaken for damage.
func TestPreallocJournalCrash(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, quiet())
	ls := s.(*levelStore)
	if ls.stor == nil {
		t.Fatal("fsync store opened without preallocated journals")
	}
	var keys []Key
	for i := range 50 {
		k := Key{"a", 1, uint64(i + 1)}
		put(t, s, k, testShard(t, k.Offset, 1, 2048))
		keys = append(keys, k)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) != 1 {
		t.Fatalf("journals %v, want one", logs)
	}
	info, err := os.Stat(logs[0])
	if err != nil || info.Size() < ls.stor.size {
		t.Fatalf("journal %s: %v; want the spare's %d bytes, zero tail included", logs[0], err, ls.stor.size)
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed)

	c := openT(t, crashed, quiet())
	for _, k := range keys {
		if _, err := c.Get(k); err != nil {
			t.Fatalf("after the crash, %v: %v", k, err)
		}
	}
}

// TestPreallocJournalRotation: after goleveldb rotates its journal, the
// next one is the refilled spare; every write survives a reopen, and a
// closed store holds neither a spare nor zero tails.
func TestPreallocJournalRotation(t *testing.T) {
	dir := t.TempDir()
	o := quiet()
	o.MaxBatchBytes = 256 << 10 // the smallest write buffer (4 MiB): rotations come soon
	s := openT(t, dir, o)
	ls := s.(*levelStore)
	want := map[Key][]byte{}
	spares := map[string]bool{} // journal -> held a whole spare while in use
	for i := 0; len(spares) < 3 && i < 2000; i++ {
		k := Key{"a", 1, uint64(i + 1)}
		want[k] = testShard(t, k.Offset, 1, 32<<10)
		put(t, s, k, want[k])
		// put has returned, so the committer is idle: wait for a refill
		// the journal kicked off, so that the next rotation finds it.
		ls.stor.wg.Wait()
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		newest := logs[len(logs)-1]
		info, err := os.Stat(newest)
		if err != nil {
			t.Fatal(err)
		}
		spares[filepath.Base(newest)] = info.Size() >= ls.stor.size
	}
	if len(spares) < 3 {
		t.Fatalf("journals %v: want 3 (two rotations)", spares)
	}
	for name, spare := range spares {
		if !spare {
			t.Fatalf("journal %s was appended, not a spare (journals %v)", name, spares)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, spareName)); !os.IsNotExist(err) {
		t.Fatalf("spare left after Close: %v", err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		if info, err := os.Stat(l); err == nil && info.Size() >= ls.stor.size {
			t.Fatalf("journal %s keeps its zero tail after Close (%d bytes)", l, info.Size())
		}
	}
	s = openT(t, dir, o)
	for k, v := range want {
		got, err := s.Get(k)
		if err != nil || string(got) != string(v) {
			t.Fatalf("%v after reopen: %v", k, err)
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPreallocJournalDamagedMidway: damage among the records of a journal
// that still has its zero tail (a crash) is refused, like any other
// damage before a journal's end: the zeros after it do not make it a tail.
func TestPreallocJournalDamagedMidway(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, quiet())
	for i := range 40 {
		put(t, s, Key{"a", 1, uint64(i + 1)}, testShard(t, uint64(i+1), 1, 4096))
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	logs, _ := filepath.Glob(filepath.Join(crashed, "*.log"))
	if len(logs) != 1 {
		t.Fatalf("journals %v, want one", logs)
	}
	b, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		b[60_000+i*7] ^= 0x5a // records run to ~165 KB; zeros follow
	}
	if err := os.WriteFile(logs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(crashed, quiet())
	wantErr(t, err, ErrCorrupt)
}

// TestPreallocSpareUnwritable: a spare that cannot be written (here its
// name is taken by a directory; in life, a full disk) does not stop the
// store from opening: journals are appended, as without preallocation.
func TestPreallocSpareUnwritable(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, spareName, "x"), 0o750); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, quiet())
	k := Key{"a", 1, 1}
	put(t, s, k, testShard(t, 1, 1, 1024))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, quiet())
	if _, err := s.Get(k); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}
