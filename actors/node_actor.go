package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
)

// nodeActor is the top of a node's tree: it routes each request to the
// partition actor of its (topic, partition), spawning it on first use.
type nodeActor struct {
	node  *Node
	parts map[string]*actor.PID
}

func newNodeActor(n *Node) *nodeActor { return &nodeActor{node: n, parts: make(map[string]*actor.PID)} }

func (a *nodeActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *slotRequest:
		key := fmt.Sprintf("%s/%d", m.topic.Name, m.partition)
		pid, ok := a.parts[key]
		if !ok {
			pid = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return newPartitionActor(a.node, m.topic.Name, m.partition) },
				actor.WithSupervisor(restartStrategy())))
			a.parts[key] = pid
		}
		ctx.Send(pid, m)
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
	}
}

func (a *partitionActor) route(ctx actor.Context, m *slotRequest) {
	lo := m.rangeStart()
	if waiting, ok := a.retiring[lo]; ok {
		a.retiring[lo] = append(waiting, m)
		return
	}
	pid, ok := a.owners[lo]
	if !ok {
		pid = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return newOwnerActor(a.node, m.topic, m.partition, lo) },
			actor.WithSupervisor(restartStrategy())))
		ctx.Watch(pid)
		a.owners[lo] = pid
		a.byPID[pid.Id] = lo
	}
	ctx.Send(pid, m)
}
