package node

import (
	"sync"
	"testing"
	"time"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/slotstore"
)

// TestNodeWritesRaceOwnerRetire: with owners retiring after 1ms idle,
// writers keep hitting one range, so requests race the owner's
// retirement. Every write must be answered, and answered right: a request
// that reached a poisoned owner would be dropped and time out, and two
// owners of one range could both accept a slot. Run it with -race too:
// protoactor's ReceiveTimeout, which owners used for this before, raced
// its timer against the mailbox here.
func TestNodeWritesRaceOwnerRetire(t *testing.T) {
	counter := &sealCounting{}
	e := newEnv(t, envOpts{ownerIdle: time.Millisecond, wrapStore: func(s slotstore.Store) slotstore.Store {
		counter.Store = s
		return counter
	}})
	const writers, each = 4, 60
	var wg sync.WaitGroup
	errs := make(chan string, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				off := midTime + uint64(w*each+i)*1000
				shard := shardFor(t, 0, uint64(w*each+i+1), off)
				req := bus.WriteReq{Topic: testTopic, Partition: 0, Offset: off, Shard: shard}.Marshal()
				for _, want := range []bus.Status{bus.StatusOK, bus.StatusOK} { // the same shard twice: idempotent
					msg, err := e.nc.Request(e.slot(0), req, requestWait)
					if err != nil {
						errs <- err.Error()
						return
					}
					r, err := bus.DecodeWriteReply(msg.Data)
					if err != nil || r.Status != want {
						errs <- "write: " + r.Status.String() + " " + r.Detail
						return
					}
				}
				// Pauses around the idle time, out of step between writers:
				// owners retire while other writers' requests arrive.
				time.Sleep(time.Duration((w*7+i*3)%5) * 400 * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	t.Logf("%d owner loads (retirements + 1)", counter.loads.Load())
	if n := e.node.stats.Writes.Load(); n != 2*writers*each {
		t.Fatalf("%d writes answered OK by owners, want %d", n, 2*writers*each)
	}
}
