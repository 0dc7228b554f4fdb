package node

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe/quorum"
)

// floorKeeper drives the node's core.ClockFloor (the clock half of the
// read frontier, docs/design.md#the-read-frontier): owners ask it for the
// clock a closing scan may use and for the floor their writes are judged
// against; it persists the floor ahead of use through the store's group
// commit, never blocking an owner.
type floorKeeper struct {
	mu sync.Mutex
	f  *core.ClockFloor
	// used mirrors f.Used() for the write path, which reads it on every
	// write (floorUsed) and should not take mu for it.
	used atomic.Int64
}

// startFloor loads the durable floor and persists one startLease ahead
// of now before the node answers anything, so its first closing scans
// close up to its clock. A restarted node keeps refusing writes older than the floor
// it held, minus A, even with its clock stepped back.
func (n *Node) startFloor() error {
	restored, err := n.cfg.Store.ClockFloor()
	if err != nil {
		return fmt.Errorf("read clock floor: %w", err)
	}
	n.floor.f = core.NewClockFloor(int64(restored))
	n.floor.used.Store(n.floor.f.Used())
	now := n.cfg.Now()
	_, persist := n.floor.f.CloseClock(now, startLease) // the clock it returns is ignored: nothing is closed yet
	if persist == 0 {
		return nil
	}
	b := &slotstore.Batch{}
	b.RaiseClockFloor(uint64(persist))
	done := make(chan error, 1)
	n.cfg.Store.Commit(b, func(err error) { done <- err })
	err = <-done
	n.floor.f.Persisted(persist, err == nil)
	if err != nil {
		return fmt.Errorf("persist clock floor: %w", err)
	}
	if restored > 0 && int64(restored) > now {
		n.cfg.Logger.Warn("clock is behind the floor this node persisted before its restart: it refuses writes older than the floor minus the accept window",
			"floor_ahead", fmt.Sprint(int64(restored)-now)+"ns")
	}
	return nil
}

// startLease is the floor a starting node persists ahead of its clock:
// the smallest accept window a profile uses (quorum.LowLatencyWindow), so
// a node that restarts at once refuses nothing fresh.
const startLease = int64(quorum.LowLatencyWindow)

// floorUsed is the floor owners refuse writes against (Owner.RaiseFloor).
func (n *Node) floorUsed() int64 { return n.floor.used.Load() }

// closeClock returns the clock a closing scan at node time now, of a topic
// with accept window accept, may use
// and, when the durable floor is due, queues its persist: the store's
// group commit carries it with the slots, and the outcome goes back to
// the core. A failed persist fails the store (the node stops, as for
// any store error); until it lands the node closes only up to the old
// floor, never beyond.
func (n *Node) closeClock(now, accept int64) int64 {
	n.floor.mu.Lock()
	clock, persist := n.floor.f.CloseClock(now, accept)
	n.floor.used.Store(n.floor.f.Used())
	n.floor.mu.Unlock()
	if persist != 0 {
		b := &slotstore.Batch{}
		b.RaiseClockFloor(uint64(persist))
		n.commit(b, func(err error) {
			n.floor.mu.Lock()
			n.floor.f.Persisted(persist, err == nil)
			n.floor.mu.Unlock()
			if err == nil {
				n.metrics.FloorPersisted()
			}
		})
	}
	return clock
}
