package node

import "github.com/asynkron/protoactor-go/actor"

// The node's mailboxes. Every message the node's actors send one another
// goes through one of these typed functions, each named for what it asks
// and documented with the Receive case that handles it, so that
// go-to-definition from a send leads to its handler instead of ending at
// an untyped ctx.Send. (The client side does the same: actors.producerRef.)
//
// The tree: nodeActor (the node's root) spawns a partitionActor per
// partition, which spawns an ownerActor per offset range; loopActors run
// repair, scrub and retention passes beside them.

// sendToRouter hands a validated request to the node actor, which spawns
// the partition's actor on first use and forwards it (nodeActor.Receive,
// *slotRequest). Node.serve sends there only for a partition it has not
// seen yet; afterwards straight to the partition (sendToPartition).
func sendToRouter(ctx actor.SenderContext, node *actor.PID, m *slotRequest) { ctx.Send(node, m) }

// sendToPartition hands a request to its partition's actor, which routes
// it to the owner of its offset range, or holds it while that owner
// retires (partitionActor.route).
func sendToPartition(ctx actor.SenderContext, partition *actor.PID, m *slotRequest) {
	ctx.Send(partition, m)
}

// sendToOwner hands a request to the slot-owner of its range
// (ownerActor.Receive, *slotRequest: write, repairWrite or scan).
func sendToOwner(ctx actor.SenderContext, owner *actor.PID, m *slotRequest) { ctx.Send(owner, m) }

// sendDrain passes a drain down the tree behind the requests queued at
// to (nodeActor, partitionActor and ownerActor, case *drain).
func sendDrain(ctx actor.SenderContext, to *actor.PID, d *drain) { ctx.Send(to, d) }

// askRetire is an idle owner asking its partition actor to stop it
// (partitionActor.Receive, *retire): the partition poisons it and holds
// new requests for the range until it terminated.
func askRetire(ctx actor.Context, lo uint64) { ctx.Request(ctx.Parent(), &retire{lo: lo}) }

// sendIdleCheck is an owner's idle timer firing (ownerActor.Receive,
// *ownerIdleCheck).
func sendIdleCheck(root *actor.RootContext, owner *actor.PID, a *ownerActor) {
	root.Send(owner, &ownerIdleCheck{owner: a})
}

// kickLoop asks a maintenance loop for a pass now, or right after the one
// under way (loopActor.Receive, *loopKick).
func kickLoop(root *actor.RootContext, loop *actor.PID) { root.Send(loop, &loopKick{}) }

// sendLoopDone tells a maintenance loop its pass ended, and whether it
// panicked (loopActor.Receive, *loopDone).
func sendLoopDone(root *actor.RootContext, loop *actor.PID, panicked any) {
	root.Send(loop, &loopDone{panicked: panicked})
}
