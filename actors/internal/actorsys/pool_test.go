package actorsys

import (
	"sync"
	"testing"
)

// TestDispatchPoolNeverWaits: a batch that blocks does not hold up the
// next one (Schedule starts another worker), every batch runs, and Close
// waits for the workers (goleak in TestMain checks none is left).
func TestDispatchPoolNeverWaits(t *testing.T) {
	d := NewPool(Throughput)
	release := make(chan struct{})
	blocked := make(chan struct{})
	d.Schedule(func() { close(blocked); <-release })
	<-blocked
	var wg sync.WaitGroup
	const n = 100
	wg.Add(n)
	for range n {
		d.Schedule(wg.Done) // sequentially reused by idle workers, or new ones
	}
	wg.Wait()
	close(release)
	d.Close()
	ran := make(chan struct{})
	d.Schedule(func() { close(ran) }) // after Close: still runs, then its goroutine exits
	<-ran
	d.Close()
}
