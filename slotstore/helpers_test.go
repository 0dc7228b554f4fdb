package slotstore

import (
	"bytes"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/raidq/raidq/stripe"
)

// leveldbDrain is goleveldb v1.0.0's memdb-pool goroutine: DB.Close signals
// it, but it then waits up to one second (time.After in mpoolDrain) before
// exiting, longer than goleak retries. It is bounded, not a leak; every
// other goroutine (our committers included) must be gone.
const leveldbDrain = "github.com/syndtr/goleveldb/leveldb.(*DB).mpoolDrain"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(leveldbDrain))
}

func quiet() Options { return Options{Logger: slog.New(slog.DiscardHandler)} }

// testShard returns a valid marshalled shard for offset whose bytes depend
// on seq (so two seqs give different bytes for one offset).
func testShard(t testing.TB, offset, seq uint64, size int) []byte {
	t.Helper()
	payload := bytes.Repeat([]byte{byte(seq), byte(offset)}, size*4/2+1)[:size*4]
	shards, err := stripe.Encode(stripe.ID{Seq: seq}, offset, 6, 4, payload)
	if err != nil {
		t.Fatal(err)
	}
	return shards[1].Marshal()
}

// commit commits b and waits for its done.
func commit(s Store, b *Batch) error {
	ch := make(chan error, 1)
	s.Commit(b, func(err error) { ch <- err })
	return <-ch
}

func put(t testing.TB, s Store, k Key, shard []byte) {
	t.Helper()
	var b Batch
	b.PutSlot(k, shard)
	if err := commit(s, &b); err != nil {
		t.Fatalf("commit %s: %v", k, err)
	}
}

type scanned struct {
	off   uint64
	shard []byte
}

func scanAll(t testing.TB, s Store, topic string, p uint32, from, to uint64) []scanned {
	t.Helper()
	var out []scanned
	err := s.Scan(topic, p, from, to, func(off uint64, shard []byte) bool {
		out = append(out, scanned{off, bytes.Clone(shard)})
		return true
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

// stores runs f against each Store implementation.
func stores(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("mem", func(t *testing.T) {
		s := NewMem(quiet())
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
	t.Run("leveldb", func(t *testing.T) {
		s := openT(t, t.TempDir(), quiet())
		f(t, s)
	})
}

func openT(t testing.TB, dir string, o Options) Store {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want one wrapping %v", err, target)
	}
}

// doneLog records done calls in the order they run.
type doneLog struct {
	mu   sync.Mutex
	ids  []int
	errs []error
	wg   sync.WaitGroup
}

func (d *doneLog) done(id int) func(error) {
	d.wg.Add(1)
	return func(err error) {
		d.mu.Lock()
		d.ids = append(d.ids, id)
		d.errs = append(d.errs, err)
		d.mu.Unlock()
		d.wg.Done()
	}
}
