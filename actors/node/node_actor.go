package node

import (
	"context"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/raidq/raidq/actors/internal/actorsys"
	"github.com/raidq/raidq/slotstore"
)

// nodeActor is the top of a node's tree: it routes each request to the
// partition actor of its (topic, partition), spawning it on first use.
// It publishes each partition actor in Node.parts, through which the NATS
// handler sends the requests that follow straight to it (one mailbox hop
// fewer per shard). A partition actor lives as long as the node, and its
// PID survives a supervisor restart, so a published PID never goes stale.
type nodeActor struct {
	node  *Node
	parts map[partKey]*actor.PID
}

func newNodeActor(n *Node) *nodeActor {
	return &nodeActor{node: n, parts: make(map[partKey]*actor.PID)}
}

func (a *nodeActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.node.spawnMaintenance(ctx) // repair, scrub, retention (repair.go)
		a.node.spawnClockWatch(ctx)  // clock_watch.go
	case *slotRequest:
		key := partKey{m.topic.Name, m.partition}
		pid, ok := a.parts[key]
		if !ok {
			pid = ctx.Spawn(actorsys.Props(a.node.pool, func() actor.Actor { return newPartitionActor(a.node, m.topic.Name, m.partition) },
				actor.WithSupervisor(actorsys.RestartStrategy())))
			a.parts[key] = pid
			a.node.parts.Store(key, pid)
		}
		sendToPartition(ctx, pid, m)
	case *drain:
		for _, pid := range a.parts {
			m.add(1)
			sendDrain(ctx, pid, m)
		}
		m.release()
	}
}

// drain travels down the actor tree behind the requests already queued:
// each actor passes it on after handling everything queued before it, and
// each owner releases it. Once every owner has, every request the node
// took in has been answered or handed to the store (Node.Stop). Stopping
// the actors without it would drop what still waits in their mailboxes:
// protoactor stops children with system messages, which jump the queue.
type drain struct {
	left atomic.Int64
	done chan struct{}
}

func (d *drain) add(n int) { d.left.Add(int64(n)) }

func (d *drain) release() {
	if d.left.Add(-1) == 0 {
		close(d.done)
	}
}

// drainActors sends a drain down the tree and waits for it (or ctx).
func (n *Node) drainActors(ctx context.Context) {
	d := &drain{done: make(chan struct{})}
	d.add(1)
	sendDrain(n.system.Root, n.root, d)
	select {
	case <-d.done:
	case <-ctx.Done():
	}
}

// settle waits (or ctx) until every commit queued so far has run its done,
// so the replies of accepted requests are sent, and until the scan pages
// those commits started have been answered.
func (n *Node) settle(ctx context.Context) {
	done := make(chan struct{})
	n.cfg.Store.Commit(&slotstore.Batch{}, func(error) { close(done) })
	select {
	case <-done:
	case <-ctx.Done():
		return
	}
	scans := make(chan struct{})
	go func() { n.scanWG.Wait(); close(scans) }()
	select { // every scan taken in has answered
	case <-scans:
	case <-ctx.Done():
	}
}

// partitionActor routes a partition's requests to the slot-owner of the
// offset range they touch. An idle owner asks to retire; until it has
// terminated (after draining its mailbox and enqueueing its commits), new
// requests for its range wait here, so two owners never serve one range.
type partitionActor struct {
	node      *Node
	topic     string
	partition uint32
	owners    map[uint64]*actor.PID
	byPID     map[string]uint64
	retiring  map[uint64][]*slotRequest
	drains    []*drain // held until no owner is retiring
}

// retire is an owner's request to stop after an idle period.
type retire struct{ lo uint64 }

func newPartitionActor(n *Node, topic string, p uint32) *partitionActor {
	return &partitionActor{node: n, topic: topic, partition: p, owners: make(map[uint64]*actor.PID),
		byPID: make(map[string]uint64), retiring: make(map[uint64][]*slotRequest)}
}

func (a *partitionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *slotRequest:
		a.route(ctx, m)
	case *drain:
		if len(a.retiring) > 0 {
			a.drains = append(a.drains, m) // its requests are re-routed first
			return
		}
		a.drainOwners(ctx, m)
	case *retire:
		if pid, ok := a.owners[m.lo]; ok && ctx.Sender() != nil && pid.Id == ctx.Sender().Id {
			a.retiring[m.lo] = nil
			delete(a.owners, m.lo)
			ctx.Poison(pid)
		}
	case *actor.Terminated:
		lo, ok := a.byPID[m.Who.Id]
		if !ok {
			return
		}
		delete(a.byPID, m.Who.Id)
		if a.owners[lo] != nil && a.owners[lo].Id == m.Who.Id {
			delete(a.owners, lo) // stopped by supervision giving up
		}
		waiting, wasRetiring := a.retiring[lo]
		delete(a.retiring, lo)
		if wasRetiring {
			for _, r := range waiting {
				a.route(ctx, r)
			}
		}
		if len(a.retiring) == 0 {
			for _, d := range a.drains {
				a.drainOwners(ctx, d)
			}
			a.drains = nil
		}
	}
}

// drainOwners passes a drain to every owner, behind their queued requests.
func (a *partitionActor) drainOwners(ctx actor.Context, d *drain) {
	for _, pid := range a.owners {
		d.add(1)
		sendDrain(ctx, pid, d)
	}
	d.release()
}

func (a *partitionActor) route(ctx actor.Context, m *slotRequest) {
	lo := m.rangeStart()
	if waiting, ok := a.retiring[lo]; ok {
		a.retiring[lo] = append(waiting, m)
		return
	}
	pid, ok := a.owners[lo]
	if !ok {
		pid = ctx.Spawn(actorsys.Props(a.node.pool, func() actor.Actor { return newOwnerActor(a.node, m.topic, m.partition, lo) },
			actor.WithSupervisor(actorsys.RestartStrategy())))
		ctx.Watch(pid)
		a.owners[lo] = pid
		a.byPID[pid.Id] = lo
	}
	sendToOwner(ctx, pid, m)
}
