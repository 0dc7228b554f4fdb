package sim

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// proc is one simulated process running shipped drivers (a lease holder,
// a group member, a Kafka gateway): the caller name of its port calls and
// its death, which ends every call it makes at once.
type proc struct {
	tag      string
	dead     chan struct{} // closed when the process dies
	deadOnce sync.Once
	calls    atomic.Uint64
}

func newProc(tag string) proc { return proc{tag: tag, dead: make(chan struct{})} }

// die ends the process's reach: every call from now fails at once.
func (p *proc) die() { p.deadOnce.Do(func() { close(p.dead) }) }

func (p *proc) isDead() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

// kvCall is one KV call of a process's driver.
type kvCall struct {
	client   string // the KV client (cut-offs and losses are by client)
	op       kvOp
	fallback time.Duration     // the call's timeout when ctx has no deadline
	limit    time.Duration     // the longest timeout, deadline or not (0: none)
	keyed    bool              // order it among the caller's calls by what it asks (bubble.postKeyed)
	ctxErr   func(error) error // the error of a call ctx ended
	done     func(kvReply)     // runs on the loop with the reply (nil: none)
}

// kv sends c.op through the simulated KV and waits for the reply, ctx's
// deadline (the timeout the KV model applies too), or the process's death.
func (p *proc) kv(s *sim, ctx context.Context, c kvCall) kvReply {
	if p.isDead() {
		return kvReply{err: errDead}
	}
	timeout := int64(c.fallback)
	if dl, ok := ctx.Deadline(); ok {
		timeout = int64(time.Until(dl))
	}
	if c.limit > 0 {
		timeout = min(timeout, int64(c.limit))
	}
	reply := make(chan kvReply, 1)
	fn := func() {
		if p.isDead() {
			reply <- kvReply{err: errDead}
			return
		}
		if c.op.issued != nil {
			c.op.issued()
		}
		s.kv.call(c.client, c.op, timeout, func(rep kvReply) {
			if c.done != nil {
				c.done(rep)
			}
			reply <- rep
		})
	}
	if c.keyed {
		s.bubble.postKeyed(p.tag, kvOpKey(c.op), fn)
	} else {
		s.bubble.post(p.tag, p.calls.Add(1), fn)
	}
	select {
	case rep := <-reply:
		return rep
	case <-ctx.Done():
		return kvReply{err: c.ctxErr(ctx.Err())}
	case <-p.dead:
		return kvReply{err: errDead}
	}
}
