package slotstore

import "sync"

// gate admits reads until the store closes and lets close wait for the
// reads in flight. Unlike an RWMutex it never blocks a read: once closing
// starts, a new read (even one nested inside a Scan callback) gets
// ErrClosed at once, so a Scan callback can't deadlock against Close.
type gate struct {
	mu      sync.Mutex
	idle    sync.Cond
	readers int
	closed  bool
}

// enter admits one read; the caller must call leave when done.
func (g *gate) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.readers++
	return nil
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.readers--
	if g.readers == 0 {
		g.idle.Broadcast()
	}
}

// close shuts the gate, waits for the reads in flight and reports whether
// this call closed it (false: it was closed already).
func (g *gate) close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	first := !g.closed
	g.closed = true
	g.idle.L = &g.mu
	for g.readers > 0 {
		g.idle.Wait()
	}
	return first
}
