package slotstore

import (
	"sync"
	"testing"
)

// fakeBackend records the size of every group written.
type fakeBackend struct {
	mu     sync.Mutex
	groups [][]int // shard bytes of each item, per write
}

func (f *fakeBackend) lookup(Key, []byte) ([]byte, bool, error) { return nil, false, nil }

func (f *fakeBackend) write(items []*item) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var g []int
	for _, it := range items {
		g = append(g, it.bytes)
	}
	f.groups = append(f.groups, g)
	return nil
}

func TestGroupCap(t *testing.T) {
	be := &fakeBackend{}
	o := quiet().withDefaults()
	o.MaxBatchBytes = 3000
	c := newCommitter(be, o)
	c.hold()
	var log doneLog
	sizes := []int{1000, 1000, 1000, 1000, 5000, 10, 2990, 10}
	for i, n := range sizes {
		c.commit(one(Key{"a", 1, uint64(i)}, make([]byte, n)), log.done(i))
	}
	c.release()
	log.wg.Wait()
	c.stop(stateClosing)
	want := [][]int{{1000, 1000, 1000}, {1000}, {5000}, {10, 2990}, {10}}
	if len(be.groups) != len(want) {
		t.Fatalf("groups %v, want %v", be.groups, want)
	}
	for i := range want {
		if len(be.groups[i]) != len(want[i]) || be.groups[i][0] != want[i][0] {
			t.Fatalf("groups %v, want %v", be.groups, want)
		}
	}
	for i, id := range log.ids {
		if id != i {
			t.Fatalf("done order %v", log.ids)
		}
	}
}
