package slotstore

import (
	"bytes"
	"testing"
)

// TestReplaceCorrupt: ReplaceCorrupt overwrites only bytes that fail their
// checks; a good shard is never overwritten (the batch fails, nothing
// panics), the same bytes are a no-op and an empty slot is a plain put.
func TestReplaceCorrupt(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		tamper := s.(Tamperer)
		good := testShard(t, 7, 1, 64)
		k := Key{"a", 1, 7}
		put(t, s, k, good)

		// Over a good shard (different or not): refused.
		other := testShard(t, 7, 2, 64)
		var b Batch
		b.ReplaceCorrupt(k, other)
		wantErr(t, commit(s, &b), ErrInvalid)
		if got, err := s.Get(k); err != nil || !bytes.Equal(got, good) {
			t.Fatalf("good shard changed after a refused replace: %v", err)
		}
		// The same bytes: a no-op.
		b = Batch{}
		b.ReplaceCorrupt(k, good)
		if err := commit(s, &b); err != nil {
			t.Fatalf("replace with identical bytes: %v", err)
		}

		// Corrupt it on "disk", then replace.
		bad := bytes.Clone(good)
		bad[len(bad)-1] ^= 0xff
		if err := tamper.Tamper(k, bad); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(k); err == nil {
			t.Fatal("tampered shard reads back clean")
		}
		b = Batch{}
		b.ReplaceCorrupt(k, good)
		if err := commit(s, &b); err != nil {
			t.Fatalf("replace a corrupt shard: %v", err)
		}
		if got, err := s.Get(k); err != nil || !bytes.Equal(got, good) {
			t.Fatalf("after replace: %v", err)
		}
		// A plain PutSlot of the same bytes is now a no-op, of others a panic.
		put(t, s, k, good)
		mustPanic(t, "put of other bytes after a replace", func() { _ = commit(s, one(k, other)) })

		// An empty slot: a plain put.
		k2 := Key{"a", 1, 9}
		b = Batch{}
		b.ReplaceCorrupt(k2, testShard(t, 9, 1, 64))
		if err := commit(s, &b); err != nil {
			t.Fatalf("replace into an empty slot: %v", err)
		}
		if _, err := s.Get(k2); err != nil {
			t.Fatal(err)
		}
	})
}
