package slotstore

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"testing"
)

func TestMemCrashLosesOnlyUnacked(t *testing.T) {
	m := NewMem(quiet())
	acked := Key{"a", 1, 1}
	put(t, m, acked, testShard(t, 1, 1, 8))
	var sb Batch
	sb.SetSeal("a", 1, 0, 10)
	if err := commit(m, &sb); err != nil {
		t.Fatal(err)
	}

	m.Hold()
	var log doneLog
	lost := Key{"a", 1, 2}
	m.Commit(one(lost, testShard(t, 2, 1, 8)), log.done(0))
	var lb Batch
	lb.SetSeal("a", 1, 0, 20)
	m.Commit(&lb, log.done(1))
	if len(log.ids) != 0 {
		t.Fatal("done ran while the committer was held")
	}
	m2 := m.Crash()
	defer m2.Close()
	log.wg.Wait()
	for _, err := range log.errs {
		wantErr(t, err, ErrClosed) // never nil: the write is gone
	}

	if m2.Incarnation() != m.Incarnation() {
		t.Fatal("crash changed the incarnation")
	}
	if _, err := m2.Get(acked); err != nil {
		t.Fatalf("acked write lost: %v", err)
	}
	_, err := m2.Get(lost)
	wantErr(t, err, ErrNotFound)
	if v, _ := m2.Seal("a", 1, 0); v != 10 {
		t.Fatalf("seal %d after crash, want the acked 10", v)
	}
	_, err = m.Get(acked)
	wantErr(t, err, ErrClosed)
	// The lost slot is empty again: other bytes may go there.
	put(t, m2, lost, testShard(t, 2, 9, 8))
	if m.Close() != nil {
		t.Fatal("Close after Crash")
	}
}

// TestMemCrashRandom crashes at random points: every slot whose done ran
// with nil survives, byte-identical; every slot still held does not.
func TestMemCrashRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	m := NewMem(quiet())
	acked := map[Key][]byte{}
	var off uint64
	for round := range 20 {
		var log doneLog
		var keys []Key
		var shards [][]byte
		held := rng.IntN(2) == 0
		for i := range 1 + rng.IntN(50) {
			if held && i == 0 {
				m.Hold()
			}
			off++
			k := Key{"t", uint32(off % 3), off}
			keys, shards = append(keys, k), append(shards, testShard(t, off, uint64(round), 4))
			m.Commit(one(k, shards[i]), log.done(i))
		}
		if !held {
			log.wg.Wait()
		}
		m2 := m.Crash()
		log.wg.Wait()
		for j, id := range log.ids {
			if log.errs[j] == nil {
				acked[keys[id]] = shards[id]
			} else if _, err := m2.Get(keys[id]); !errors.Is(err, ErrNotFound) {
				t.Fatalf("round %d: unacked %s survived: %v", round, keys[id], err)
			}
		}
		m = m2
		for k, v := range acked {
			if got, err := m.Get(k); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("round %d: acked %s lost: %v", round, k, err)
			}
		}
	}
	m.Close()
}

func TestMemFailedWrite(t *testing.T) {
	m := NewMem(quiet())
	defer m.Close()
	put(t, m, Key{"a", 1, 1}, testShard(t, 1, 1, 8))
	m.Hold()
	var log doneLog
	for i := range 3 {
		m.Commit(one(Key{"a", 1, uint64(10 + i)}, testShard(t, uint64(10+i), 1, 8)), log.done(i))
	}
	m.FailNextWrite(io.ErrShortWrite)
	m.Release()
	log.wg.Wait()
	for _, err := range log.errs {
		wantErr(t, err, io.ErrShortWrite)
	}
	// The store is failed for good.
	wantErr(t, commit(m, one(Key{"a", 1, 20}, testShard(t, 20, 1, 8))), io.ErrShortWrite)
	wantErr(t, commit(m, &Batch{}), io.ErrShortWrite)
	_, err := m.DropBefore("a", 1, 5)
	wantErr(t, err, io.ErrShortWrite)
	if _, err := m.Get(Key{"a", 1, 1}); err != nil { // reads still work
		t.Fatal(err)
	}
	if got := scanAll(t, m, "a", 1, 0, math.MaxUint64); len(got) != 1 {
		t.Fatalf("failed writes visible: %d slots", len(got))
	}
}

func TestMemBusy(t *testing.T) {
	o := quiet()
	o.MaxQueue = 4
	m := NewMem(o)
	defer m.Close()
	m.Hold()
	var log doneLog
	for i := range 4 {
		m.Commit(one(Key{"a", 1, uint64(i)}, testShard(t, uint64(i), 1, 8)), log.done(i))
	}
	busy := false
	m.Commit(one(Key{"a", 1, 99}, testShard(t, 99, 1, 8)), func(err error) { busy = true; wantErr(t, err, ErrBusy) })
	if !busy {
		t.Fatal("Commit on a full queue did not fail at once with ErrBusy")
	}
	m.Release()
	log.wg.Wait()
	for _, err := range log.errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := commit(m, one(Key{"a", 1, 99}, testShard(t, 99, 1, 8))); err != nil {
		t.Fatalf("after the queue drained: %v", err)
	}
}

func TestMemGetReturnsCopy(t *testing.T) {
	m := NewMem(quiet())
	defer m.Close()
	k := Key{"a", 1, 1}
	shard := testShard(t, 1, 1, 8)
	put(t, m, k, shard)
	got, _ := m.Get(k)
	got[0] ^= 0xff
	shard[1] ^= 0xff
	if _, err := m.Get(k); err != nil {
		t.Fatalf("stored bytes changed through a caller's slice: %v", err)
	}
}
