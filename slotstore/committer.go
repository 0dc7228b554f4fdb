package slotstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/invariants"
)

// backend is the storage a committer writes to.
type backend interface {
	// lookup returns the applied bytes of slot k (encoded key enc).
	// It is called with committer.mu held, so it must not call back.
	lookup(k Key, enc []byte) ([]byte, bool, error)
	// write applies every put and seal of items as one atomic write,
	// synced unless NoSync. Only the committer goroutine calls it.
	write(items []*item) error
}

// item is one queued Commit.
type item struct {
	puts  []slotPut // the batch's puts minus no-op re-puts
	seals []sealSet
	metas []metaPut
	bytes int
	done  func(error)
}

type commitState int

const (
	stateOpen     commitState = iota
	stateClosing              // drain the queue, then stop
	stateCrashing             // drop the queue, then stop (MemStore.Crash)
)

var errCrashed = fmt.Errorf("slotstore: crashed before the write was durable: %w", ErrClosed)

// committer owns the commit queue and the single goroutine that turns queued
// batches into group-committed writes. It also enforces write-once: pending
// holds the bytes of every put that is queued or being written, so a second
// put of a slot is checked against it or, once applied, against the backend.
type committer struct {
	be       backend
	log      *slog.Logger
	maxQueue int
	maxBytes int

	mu      sync.Mutex
	cond    sync.Cond // signals queue, state, held and busy changes
	queue   []*item
	pending map[string][]byte
	state   commitState
	held    bool  // MemStore.Hold: leave the queue alone
	busy    bool  // a group is being written
	failed  error // sticky: the first write failure
	stopped chan struct{}
}

func newCommitter(be backend, o Options) *committer {
	c := &committer{be: be, log: o.Logger, maxQueue: o.MaxQueue, maxBytes: o.MaxBatchBytes,
		pending: make(map[string][]byte), stopped: make(chan struct{})}
	c.cond.L = &c.mu
	go c.run()
	return c
}

// commit implements Store.Commit.
func (c *committer) commit(b *Batch, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	if err := c.enqueue(b, done); err != nil {
		done(err)
	}
}

func (c *committer) enqueue(b *Batch, done func(error)) error {
	if b == nil {
		b = &Batch{}
	}
	if b.err != nil {
		return b.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.admitLocked(); err != nil {
		return err
	}
	puts, err := c.newPutsLocked(b.puts)
	if err != nil {
		return err
	}
	for _, p := range puts {
		c.pending[string(p.enc)] = p.shard
	}
	c.queue = append(c.queue, &item{puts: puts, seals: b.seals, metas: b.metas, bytes: b.bytes, done: done})
	c.cond.Broadcast()
	return nil
}

func (c *committer) admitLocked() error {
	switch {
	case c.state != stateOpen:
		return fmt.Errorf("slotstore: commit: %w", ErrClosed)
	case c.failed != nil:
		return c.failed
	case len(c.queue) >= c.maxQueue:
		return fmt.Errorf("slotstore: commit: %w (%d batches queued)", ErrBusy, len(c.queue))
	}
	return nil
}

// newPutsLocked returns the puts that are not already stored or queued with
// the same bytes, and panics if one is stored or queued with other bytes.
func (c *committer) newPutsLocked(puts []slotPut) ([]slotPut, error) {
	out := make([]slotPut, 0, len(puts))
	var inBatch map[string][]byte
	for _, p := range puts {
		old, ok, err := c.existingLocked(p, inBatch)
		if p.replace {
			ok, err = c.checkReplace(p, old, ok, err) // replace_corrupt.go
		}
		if err != nil {
			return nil, err
		}
		if ok {
			if !bytes.Equal(old, p.shard) {
				panic(conflictMessage(p.key, old, p.shard))
			}
			continue
		}
		if len(puts) > 1 {
			if inBatch == nil {
				inBatch = make(map[string][]byte, len(puts))
			}
			inBatch[string(p.enc)] = p.shard
		}
		out = append(out, p)
	}
	return out, nil
}

func (c *committer) existingLocked(p slotPut, inBatch map[string][]byte) ([]byte, bool, error) {
	if old, ok := inBatch[string(p.enc)]; ok {
		return old, true, nil
	}
	if old, ok := c.pending[string(p.enc)]; ok {
		return old, true, nil
	}
	old, ok, err := c.be.lookup(p.key, p.enc)
	if err != nil {
		return nil, false, fmt.Errorf("slotstore: put %s: write-once check: %w", p.key, err)
	}
	return old, ok, nil
}

// conflictMessage describes a write-once violation for the panic.
func conflictMessage(k Key, old, shard []byte) string {
	return fmt.Sprintf("slotstore: write-once violation: %s already holds %s, refusing %s "+
		"(the slot-owner actor must check the slot and answer CONFLICT before Commit)",
		k, describeShard(old), describeShard(shard))
}

func describeShard(b []byte) string {
	h, err := stripe.ParseHeader(b)
	if err != nil {
		return fmt.Sprintf("%d unparseable bytes", len(b))
	}
	return fmt.Sprintf("%d bytes of stripe %s index %d", len(b), h.ID, h.Index)
}

// run is the committer goroutine.
func (c *committer) run() {
	defer close(c.stopped)
	for {
		group, err := c.next()
		if group == nil {
			return
		}
		if err == nil {
			err = c.write(group)
		}
		c.finish(group)
		for _, it := range group {
			it.done(err)
		}
	}
}

// next waits for work and takes the next group, or returns nil to stop.
// A non-nil error means: fail the group without writing it.
func (c *committer) next() ([]*item, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.state == stateOpen && (len(c.queue) == 0 || c.held) {
		c.cond.Wait()
	}
	switch {
	case len(c.queue) == 0:
		return nil, nil
	case c.state == stateCrashing:
		return c.takeLocked(len(c.queue)), errCrashed
	case c.failed != nil:
		return c.takeLocked(len(c.queue)), c.failed
	}
	c.busy = true
	return c.takeLocked(c.groupLenLocked()), nil
}

// groupLenLocked counts the queued items that fit in maxBytes (at least one).
func (c *committer) groupLenLocked() int {
	n, size := 0, 0
	for n < len(c.queue) {
		s := c.queue[n].bytes
		if n > 0 && size+s > c.maxBytes {
			break
		}
		size += s
		n++
	}
	return n
}

func (c *committer) takeLocked(n int) []*item {
	group := c.queue[:n:n]
	if n == len(c.queue) {
		c.queue = nil
	} else {
		c.queue = slices.Clone(c.queue[n:])
	}
	return group
}

// write writes a group; a failure fails the store for good.
func (c *committer) write(group []*item) error {
	err := c.be.write(group)
	if err == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = fmt.Errorf("slotstore: write failed, store refuses every later commit (restart the node): %w", err)
		c.log.Error("slotstore: write failed; store is failed", "err", err)
	}
	return c.failed
}

// finish forgets the group's pending puts: they are applied now (or lost
// with a failed or crashed store, which refuses every later commit).
func (c *committer) finish(group []*item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, it := range group {
		for _, p := range it.puts {
			delete(c.pending, string(p.enc))
		}
	}
	if invariants.Enabled {
		c.checkPendingLocked()
	}
	c.busy = false
	c.cond.Broadcast()
}

// checkPendingLocked asserts that the pending work matches the queue, as
// the group commit leaves it (finish): every slot put by a queued batch
// is pending with the bytes of its last queued put, and no other slot
// is, so the write-once check (existingLocked) sees exactly what is
// queued and not yet applied (enqueue adds a batch's puts to both,
// finish takes a written group's out of pending).
func (c *committer) checkPendingLocked() {
	last := make(map[string][]byte)
	for _, it := range c.queue {
		for _, p := range it.puts {
			last[string(p.enc)] = p.shard
		}
	}
	for k, b := range last {
		pb, ok := c.pending[k]
		switch {
		case !ok:
			invariants.Failf("slotstore: committer: slot %x queued but not pending (%d pending, %d batches queued)", k, len(c.pending), len(c.queue))
		case !bytes.Equal(pb, b):
			invariants.Failf("slotstore: committer: slot %x pending with other bytes than queued", k)
		}
	}
	if len(c.pending) != len(last) {
		invariants.Failf("slotstore: committer: %d slots pending, %d queued", len(c.pending), len(last))
	}
}

// hold stops the committer taking new groups and waits for the one being
// written, so that no further commit becomes durable until release.
func (c *committer) hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = true
	for c.busy {
		c.cond.Wait()
	}
}

func (c *committer) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	c.cond.Broadcast()
}

// stop switches to stateClosing or stateCrashing (the first call wins) and
// waits for the committer goroutine to exit. It must not be called from a
// done callback.
func (c *committer) stop(s commitState) {
	c.mu.Lock()
	if c.state == stateOpen {
		c.state = s
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	<-c.stopped
}

// failure returns the sticky write failure, if any.
func (c *committer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}
