package actorsys

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Repeat sends msg to pid every interval, from the system's root
// context, until the returned stop is called (stop is idempotent and safe
// from any goroutine; a tick already on its way may still arrive).
//
// Why not protoactor's scheduler.SendRepeatedly: its timer reads its
// cancellation state without an atomic load, which the race detector
// reports whenever a repeating timer is stopped while it fires.
func Repeat(sys *actor.ActorSystem, interval time.Duration, pid *actor.PID, msg any) (stop func()) {
	t := time.NewTicker(interval)
	done := make(chan struct{})
	go func() {
		defer t.Stop()
		for {
			select {
			case <-t.C:
				sys.Root.Send(pid, msg)
			case <-done:
				return
			}
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}
