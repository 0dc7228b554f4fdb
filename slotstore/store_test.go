package slotstore

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/raidq/raidq/stripe"
)

type topicPart struct {
	topic string
	p     uint32
}

// Neighbours whose keys would bleed into each other without the length
// prefix and fixed-width fields, and offsets at the byte boundaries.
var (
	bleedParts   = []topicPart{{"a", 1}, {"a", 2}, {"ab", 1}, {"b", 0}, {"a", 0}}
	bleedOffsets = []uint64{0, 1, 255, 256, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
)

// fillBleed puts a slot at every bleedOffset of every bleedPart, in random
// order, half in one batch and half one by one.
func fillBleed(t *testing.T, s Store) map[Key][]byte {
	want := map[Key][]byte{}
	var keys []Key
	for pi, pt := range bleedParts {
		for _, off := range bleedOffsets {
			k := Key{pt.topic, pt.p, off}
			want[k] = testShard(t, off, uint64(pi), 16)
			keys = append(keys, k)
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	var b Batch
	for _, k := range keys[:len(keys)/2] {
		b.PutSlot(k, want[k])
	}
	if err := commit(s, &b); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys[len(keys)/2:] {
		put(t, s, k, want[k])
	}
	return want
}

func TestPutGetScanNoBleed(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		want := fillBleed(t, s)
		for k, v := range want {
			if got, err := s.Get(k); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("get %s: %v (equal=%v)", k, err, bytes.Equal(got, v))
			}
		}
		for _, pt := range bleedParts {
			got := scanAll(t, s, pt.topic, pt.p, 0, math.MaxUint64)
			if len(got) != len(bleedOffsets)-1 { // to is exclusive: MaxUint64 is out
				t.Fatalf("%s/%d: scanned %d slots, want %d", pt.topic, pt.p, len(got), len(bleedOffsets)-1)
			}
			for i, sc := range got {
				if sc.off != bleedOffsets[i] || !bytes.Equal(sc.shard, want[Key{pt.topic, pt.p, sc.off}]) {
					t.Fatalf("%s/%d: slot %d is offset %d (or other bytes), want %d", pt.topic, pt.p, i, sc.off, bleedOffsets[i])
				}
			}
		}
		_, err := s.Get(Key{"a", 3, 0})
		wantErr(t, err, ErrNotFound)
		_, err = s.Get(Key{"a", 1, 2})
		wantErr(t, err, ErrNotFound)
	})
}

func TestScanBounds(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		fillBleed(t, s)
		if got := scanAll(t, s, "a", 1, 1, 1<<32); len(got) != 3 || got[0].off != 1 || got[2].off != 256 {
			t.Fatalf("bounded scan: %+v", got)
		}
		if got := scanAll(t, s, "a", 1, 5, 5); len(got) != 0 {
			t.Fatalf("empty range scanned %d", len(got))
		}
		if got := scanAll(t, s, "c", 1, 0, math.MaxUint64); len(got) != 0 {
			t.Fatalf("unknown topic scanned %d", len(got))
		}
		n := 0
		s.Scan("a", 1, 0, math.MaxUint64, func(uint64, []byte) bool { n++; return n < 3 })
		if n != 3 {
			t.Fatalf("scan went on after fn returned false: %d calls", n)
		}
	})
}

func TestGroupCommitOrder(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		const n = 2000
		var log doneLog
		barrierSaw := -1
		for i := range n {
			var b Batch
			b.PutSlot(Key{"t", 0, uint64(i)}, testShard(t, uint64(i), 1, 8))
			s.Commit(&b, log.done(i))
			if i == n/2 {
				log.wg.Add(1)
				s.Commit(&Batch{}, func(err error) {
					log.mu.Lock()
					barrierSaw = len(log.ids)
					log.mu.Unlock()
					log.wg.Done()
				})
			}
		}
		log.wg.Wait()
		for i, id := range log.ids {
			if id != i || log.errs[i] != nil {
				t.Fatalf("done #%d was commit %d (err %v): not submission order", i, id, log.errs[i])
			}
		}
		if barrierSaw != n/2+1 {
			t.Fatalf("barrier done ran after %d dones, want %d", barrierSaw, n/2+1)
		}
		if got := scanAll(t, s, "t", 0, 0, n); len(got) != n {
			t.Fatalf("scanned %d slots, want %d", len(got), n)
		}
	})
}

func TestConcurrentCommits(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		const writers, per = 8, 200
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				var log doneLog
				for i := range per {
					var b Batch
					off := uint64(w*per + i)
					b.PutSlot(Key{"t", uint32(w % 2), off}, testShard(t, off, 1, 32))
					b.SetSeal("t", uint32(w%2), uint64(w), off)
					s.Commit(&b, log.done(i))
				}
				log.wg.Wait()
				for i, id := range log.ids {
					if id != i || log.errs[i] != nil {
						errs <- fmt.Errorf("writer %d: done #%d was commit %d (err %v)", w, i, id, log.errs[i])
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		total := len(scanAll(t, s, "t", 0, 0, math.MaxUint64)) + len(scanAll(t, s, "t", 1, 0, math.MaxUint64))
		if total != writers*per {
			t.Fatalf("%d slots, want %d", total, writers*per)
		}
		for w := range writers {
			if seal, _ := s.Seal("t", uint32(w%2), uint64(w)); seal != uint64(w*per+per-1) {
				t.Fatalf("writer %d seal %d, want %d", w, seal, w*per+per-1)
			}
		}
	})
}

func TestSeal(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		if seal, err := s.Seal("a", 1, 1000); seal != 0 || err != nil {
			t.Fatalf("no seal: %d, %v", seal, err)
		}
		seal := func(rs, v uint64) {
			var b Batch
			b.SetSeal("a", 1, rs, v)
			if err := commit(s, &b); err != nil {
				t.Fatal(err)
			}
		}
		seal(1000, 1500)
		seal(2000, 2100)
		seal(1000, 1200) // lower: ignored
		var b Batch
		b.SetSeal("a", 1, 2000, 2900)
		b.SetSeal("a", 1, 2000, 2500)
		b.SetSeal("ab", 1, 1000, 7)
		if err := commit(s, &b); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			topic string
			rs    uint64
			want  uint64
		}{{"a", 1000, 1500}, {"a", 2000, 2900}, {"ab", 1000, 7}, {"a", 3000, 0}} {
			if got, err := s.Seal(c.topic, 1, c.rs); got != c.want || err != nil {
				t.Fatalf("seal %s/%d: %d, %v; want %d", c.topic, c.rs, got, err, c.want)
			}
		}
		if got, _ := s.Seal("a", 2, 1000); got != 0 {
			t.Fatalf("seal bled to partition 2: %d", got)
		}
	})
}

func TestDropBefore(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		var b Batch
		for off := uint64(10); off < 20; off++ {
			b.PutSlot(Key{"a", 1, off}, testShard(t, off, 1, 8))
			b.PutSlot(Key{"a", 2, off}, testShard(t, off, 2, 8))
			b.PutSlot(Key{"ab", 1, off}, testShard(t, off, 3, 8))
		}
		b.SetSeal("a", 1, 10, 12)
		b.SetSeal("a", 1, 15, 17)
		b.SetSeal("a", 2, 10, 12)
		if err := commit(s, &b); err != nil {
			t.Fatal(err)
		}
		n, err := s.DropBefore("a", 1, 15)
		if n != 5 || err != nil {
			t.Fatalf("dropped %d, %v; want 5", n, err)
		}
		got := scanAll(t, s, "a", 1, 0, math.MaxUint64)
		if len(got) != 5 || got[0].off != 15 {
			t.Fatalf("after drop: %d slots from %d", len(got), got[0].off)
		}
		if len(scanAll(t, s, "a", 2, 0, 100)) != 10 || len(scanAll(t, s, "ab", 1, 0, 100)) != 10 {
			t.Fatal("drop bled into another partition or topic")
		}
		if v, _ := s.Seal("a", 1, 10); v != 0 {
			t.Fatalf("seal of range 10 survived: %d", v)
		}
		if v, _ := s.Seal("a", 1, 15); v != 17 {
			t.Fatalf("seal of range 15: %d, want 17", v)
		}
		if v, _ := s.Seal("a", 2, 10); v != 12 {
			t.Fatalf("seal of partition 2: %d, want 12", v)
		}
		if n, err := s.DropBefore("a", 1, 15); n != 0 || err != nil {
			t.Fatalf("second drop: %d, %v", n, err)
		}
		if n, err := s.DropBefore("zz", 1, 15); n != 0 || err != nil {
			t.Fatalf("drop of unknown topic: %d, %v", n, err)
		}
	})
}

func TestRePut(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		k := Key{"a", 1, 5}
		first, other := testShard(t, 5, 1, 8), testShard(t, 5, 2, 8)
		put(t, s, k, first)
		put(t, s, k, bytes.Clone(first)) // same bytes: a retry, no-op
		mustPanic(t, "durable slot", func() { s.Commit(one(k, other), func(error) {}) })

		var b Batch // conflict inside one batch
		b.PutSlot(Key{"a", 1, 6}, testShard(t, 6, 1, 8))
		b.PutSlot(Key{"a", 1, 6}, testShard(t, 6, 2, 8))
		mustPanic(t, "same batch", func() { s.Commit(&b, func(error) {}) })

		// The store still works after the panics, and nothing of b landed.
		put(t, s, Key{"a", 1, 6}, testShard(t, 6, 3, 8))
		if got, err := s.Get(k); err != nil || !bytes.Equal(got, first) {
			t.Fatalf("slot changed: %v", err)
		}
	})
}

func TestRePutPending(t *testing.T) {
	m := NewMem(quiet())
	defer m.Close()
	k := Key{"a", 1, 5}
	first := testShard(t, 5, 1, 8)
	m.Hold()
	var log doneLog
	m.Commit(one(k, first), log.done(0))
	m.Commit(one(k, bytes.Clone(first)), log.done(1))
	mustPanic(t, "queued slot", func() { m.Commit(one(k, testShard(t, 5, 2, 8)), func(error) {}) })
	m.Release()
	log.wg.Wait()
	if log.ids[0] != 0 || log.ids[1] != 1 || log.errs[0] != nil || log.errs[1] != nil {
		t.Fatalf("dones %v %v", log.ids, log.errs)
	}
}

func one(k Key, shard []byte) *Batch {
	var b Batch
	b.PutSlot(k, shard)
	return &b
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("%s: no panic on a different re-put", what)
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, "write-once violation") {
			t.Fatalf("%s: unclear panic %q", what, msg)
		}
	}()
	f()
}

func TestCorruptShard(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		good := testShard(t, 7, 1, 64)
		bad := bytes.Clone(good)
		bad[len(bad)-1] ^= 0xff
		put(t, s, Key{"a", 1, 7}, bad)
		put(t, s, Key{"a", 1, 8}, []byte("not a shard at all"))
		for _, off := range []uint64{7, 8} {
			_, err := s.Get(Key{"a", 1, off})
			wantErr(t, err, ErrCorrupt)
			wantErr(t, err, stripe.ErrCorruptShard)
		}
		if got := scanAll(t, s, "a", 1, 0, 100); len(got) != 2 || !bytes.Equal(got[0].shard, bad) {
			t.Fatalf("scan must return raw bytes unverified: %d slots", len(got))
		}
	})
}

func TestInvalid(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ok := testShard(t, 1, 1, 8)
		for name, b := range map[string]*Batch{
			"empty topic":   one(Key{"", 1, 1}, ok),
			"long topic":    one(Key{strings.Repeat("x", MaxTopicLen+1), 1, 1}, ok),
			"NUL in topic":  one(Key{"a\x00b", 1, 1}, ok),
			"empty shard":   one(Key{"a", 1, 1}, nil),
			"huge shard":    one(Key{"a", 1, 1}, make([]byte, MaxShardBytes+1)),
			"bad seal name": func() *Batch { var b Batch; b.SetSeal("", 1, 0, 1); return &b }(),
		} {
			called := false
			s.Commit(b, func(err error) { called = true; wantErr(t, err, ErrInvalid) })
			if !called {
				t.Fatalf("%s: done not called before Commit returned", name)
			}
		}
		put(t, s, Key{strings.Repeat("x", MaxTopicLen), 1, 1}, ok) // the longest allowed
		_, err := s.Get(Key{"", 1, 1})
		wantErr(t, err, ErrInvalid)
		wantErr(t, s.Scan("a\x00", 1, 0, 1, nil), ErrInvalid)
		_, err = s.Seal("", 1, 0)
		wantErr(t, err, ErrInvalid)
		_, err = s.DropBefore("", 1, 0)
		wantErr(t, err, ErrInvalid)
	})
}

func TestClose(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		var log doneLog
		for i := range 100 {
			s.Commit(one(Key{"a", 1, uint64(i)}, testShard(t, uint64(i), 1, 8)), log.done(i))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Close flushed the queue: every done ran, successfully.
		if len(log.ids) != 100 {
			t.Fatalf("%d dones ran before Close returned, want 100", len(log.ids))
		}
		for _, err := range log.errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		called := false
		s.Commit(one(Key{"a", 1, 1000}, testShard(t, 1000, 1, 8)), func(err error) { called = true; wantErr(t, err, ErrClosed) })
		if !called {
			t.Fatal("done not called at once on a closed store")
		}
		_, err := s.Get(Key{"a", 1, 1})
		wantErr(t, err, ErrClosed)
		wantErr(t, s.Scan("a", 1, 0, 10, nil), ErrClosed)
		_, err = s.Seal("a", 1, 0)
		wantErr(t, err, ErrClosed)
		_, err = s.DropBefore("a", 1, 10)
		wantErr(t, err, ErrClosed)
	})
}

func TestNilDone(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		s.Commit(one(Key{"a", 1, 1}, testShard(t, 1, 1, 8)), nil)
		if err := commit(s, &Batch{}); err != nil { // barrier
			t.Fatal(err)
		}
		if _, err := s.Get(Key{"a", 1, 1}); err != nil {
			t.Fatal(err)
		}
	})
}
