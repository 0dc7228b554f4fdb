package slotstore

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
)

// benchCommit commits one 1 KiB shard per op from many goroutines, each
// waiting for its done as a slot-owner would before answering OK.
func benchCommit(b *testing.B, s Store) {
	shard := testShard(b, 1, 1, 1024)
	var next atomic.Uint64
	b.SetBytes(int64(len(shard)))
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var wg sync.WaitGroup
		for pb.Next() {
			var batch Batch
			batch.PutSlot(Key{"bench", 0, next.Add(1)}, shard)
			wg.Add(1)
			var failed error
			s.Commit(&batch, func(err error) { failed = err; wg.Done() })
			wg.Wait()
			if failed != nil {
				b.Error(failed)
				return
			}
		}
	})
}

func BenchmarkCommitSync(b *testing.B) {
	benchCommit(b, openT(b, b.TempDir(), quiet()))
}

func BenchmarkCommitNoSync(b *testing.B) {
	o := quiet()
	o.NoSync = true
	benchCommit(b, openT(b, b.TempDir(), o))
}

func BenchmarkCommitMem(b *testing.B) {
	m := NewMem(quiet())
	defer m.Close()
	benchCommit(b, m)
}

// BenchmarkScan scans 10k slots of 1 KiB per op.
func BenchmarkScan(b *testing.B) {
	o := quiet()
	o.NoSync = true
	s := openT(b, b.TempDir(), o)
	shard := testShard(b, 1, 1, 1024)
	const n = 10000
	var batch Batch
	for i := range n {
		batch.PutSlot(Key{"bench", 0, uint64(i)}, shard)
		batch.PutSlot(Key{"bench", 1, uint64(i)}, shard) // a neighbour to skip
	}
	if err := commit(s, &batch); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n * int64(len(shard)))
	b.ResetTimer()
	for b.Loop() {
		count := 0
		s.Scan("bench", 0, 0, math.MaxUint64, func(uint64, []byte) bool { count++; return true })
		if count != n {
			b.Fatalf("scanned %d", count)
		}
	}
}
