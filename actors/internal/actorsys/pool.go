package actorsys

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Pool is the protoactor Dispatcher of one actor system (a Node or
// a Client): it runs mailbox batches on goroutines it keeps for a while
// instead of starting a new goroutine for every batch.
//
// Why: protoactor's default dispatcher starts a goroutine each time a
// mailbox goes from empty to non-empty. A fresh goroutine has a small stack
// that the actor's Receive (producer add, link reply, owner write) grows
// again every time: in the bench's profiles runtime.newstack/copystack was
// 13 % of the client's CPU and 5 % of a node's, on the path of every ack.
// A kept goroutine keeps its grown stack.
//
// Schedule never waits: it hands the batch to an idle worker if one is
// parked on the unbuffered channel, else starts a new worker, so a busy or
// blocked batch can never hold up another mailbox (the default dispatcher's
// guarantee). A worker parks for up to dispatchIdle between batches, then
// exits. Close makes every worker exit and waits for them; a batch
// scheduled after Close still runs, on a goroutine that then exits.
type Pool struct {
	throughput int
	work       chan func()
	quit       chan struct{}
	closeOnce  sync.Once
	wg         sync.WaitGroup
}

// Throughput is the messages a mailbox processes per batch before it
// yields its goroutine (protoactor's default).
const Throughput = 300

// dispatchIdle is how long a worker waits for the next batch before it exits.
const dispatchIdle = 2 * time.Second

var _ actor.Dispatcher = (*Pool)(nil)

// NewPool returns a pool whose mailboxes process up to throughput
// messages per batch (protoactor's default is 300).
func NewPool(throughput int) *Pool {
	return &Pool{throughput: throughput, work: make(chan func()), quit: make(chan struct{})}
}

// Throughput implements actor.Dispatcher.
func (d *Pool) Throughput() int { return d.throughput }

// Schedule implements actor.Dispatcher; protoactor calls it from any
// goroutine that posts to an idle mailbox.
func (d *Pool) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		d.wg.Add(1)
		go d.worker(fn)
	}
}

func (d *Pool) worker(fn func()) {
	defer d.wg.Done()
	idle := time.NewTimer(dispatchIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(dispatchIdle)
		select {
		case fn = <-d.work:
		case <-idle.C:
			return
		case <-d.quit:
			return
		}
	}
}

// Close stops the parked workers and waits for every worker to finish its
// batch. Call it after the actor system's actors have stopped.
func (d *Pool) Close() {
	d.closeOnce.Do(func() { close(d.quit) })
	d.wg.Wait()
}

// Props is actor.PropsFromProducer on pool d.
func Props(d *Pool, produce func() actor.Actor, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(produce, append(opts, actor.WithDispatcher(d))...)
}
