package node

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// defaultOwnerIdle is how long a slot owner waits without requests before
// it retires (Config.OwnerIdle). Ranges older than the accept window
// only see scans, so most owners live a few seconds.
const defaultOwnerIdle = 5 * time.Second

// ownerActor is the slot-owner of one offset range of one partition on one
// node (docs/design.md#slot-store). It is the only writer of its slots: every write and
// scan of the range passes through its mailbox, so check-then-insert is
// race free. It calls core.Owner and carries out the effects: commit to the
// store (group commit; reply after fsync), seal, scan.
type ownerActor struct {
	node      *Node
	topic     *meta.Topic
	partition uint32
	lo        uint64
	core      *core.Owner
	inflight  atomic.Int64 // commits queued but not yet done
	// busy: a request arrived since the last idle check. The idle check is
	// the owner's own timer, not protoactor's ReceiveTimeout, whose timer
	// callback and mailbox touch the same field without a lock (a data
	// race in actor_context.go that -race reports).
	busy      bool
	idleTimer *time.Timer
}

// ownerIdleCheck is an owner's idle timer firing; owner tells a restarted
// instance (which arms its own timer) to ignore its predecessor's.
type ownerIdleCheck struct{ owner *ownerActor }

func newOwnerActor(n *Node, t *meta.Topic, p uint32, lo uint64) *ownerActor {
	return &ownerActor{node: n, topic: t, partition: p, lo: lo}
}

func (a *ownerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.node.owners.Add(1)
		a.load()
		a.armIdle(ctx)
	case *actor.Restarting, *actor.Stopped:
		a.node.owners.Add(-1) // Started counts it again after a restart
		if a.idleTimer != nil {
			a.idleTimer.Stop()
		}
	case *slotRequest:
		a.busy = true
		if m.write != nil && m.repaired != nil {
			a.repairWrite(m) // repair_write.go
		} else if m.write != nil {
			a.write(m)
		} else {
			a.scan(m)
		}
	case *drain:
		a.busy = true
		m.release() // every request queued before it is answered or committed
	case *ownerIdleCheck:
		if m.owner != a {
			return
		}
		if !a.busy && a.inflight.Load() == 0 {
			askRetire(ctx, a.lo) // the parent poisons this owner
			return
		}
		// Busy, or idle with a commit still in flight: check again later,
		// or an owner idle during a slow commit would never retire.
		a.busy = false
		a.armIdle(ctx)
	}
}

// armIdle starts the owner's next idle check, OwnerIdle from now.
func (a *ownerActor) armIdle(ctx actor.Context) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	a.idleTimer = time.AfterFunc(a.node.cfg.OwnerIdle, func() { sendIdleCheck(root, self, a) })
}

// load rebuilds the owner's view from the store. It first waits for a
// barrier so that commits queued by a previous owner of the range (one
// that retired or crashed) are visible. Blocking here is bounded by one
// group commit and happens once per owner life.
func (a *ownerActor) load() {
	st := a.node.cfg.Store
	done := make(chan error, 1)
	st.Commit(&slotstore.Batch{}, func(err error) { done <- err })
	err := <-done
	seal := uint64(0)
	slots := make(map[uint64]core.SlotInfo)
	if err == nil {
		seal, err = st.Seal(a.topic.Name, a.partition, a.lo)
	}
	if err == nil {
		err = st.Scan(a.topic.Name, a.partition, a.lo, a.lo+core.RangeNanos, func(off uint64, b []byte) bool {
			h, herr := stripe.ParseHeader(b)
			if herr != nil {
				// A slot with a bad header is still occupied: it must
				// never be written again. Record it as an unknown stripe.
				slots[off] = core.SlotInfo{Index: 255}
				return true
			}
			slots[off] = core.SlotInfo{ID: h.ID, Index: h.Index, DataCRC: h.DataCRC}
			return true
		})
	}
	if err != nil {
		a.node.fail(fmt.Errorf("load %s/%d range %d: %w", a.topic.Name, a.partition, a.lo, err))
	}
	p := a.topic.Params
	a.core = core.NewOwner(core.OwnerConfig{Topic: a.topic.Name, Partition: a.partition, Lo: a.lo,
		Accept: a.node.acceptFor(a.topic, a.lo), Future: int64(p.FutureBound), Birth: a.topic.BirthFor(st.Incarnation().Birth),
		Grid: p.Grid}, seal, slots)
}

// write carries out core.Owner.Write: persist then reply OK, or reply now.
func (a *ownerActor) write(m *slotRequest) {
	n := a.node
	a.core.RaiseFloor(n.floorUsed())
	d := a.core.Write(n.cfg.Now(), m.write.Offset, &m.shard, m.write.Repair)
	a.count(d.Status)
	if !d.Persist && !d.Barrier {
		n.writeReply(m.msg, m.start, bus.Status(d.Status), d.Detail)
		return
	}
	b := &slotstore.Batch{}
	if d.Persist {
		b.PutSlot(slotstore.Key{Topic: a.topic.Name, Partition: a.partition, Offset: m.write.Offset}, m.write.Shard)
	}
	a.inflight.Add(1)
	n.commit(b, func(err error) {
		defer a.inflight.Add(-1)
		if err != nil {
			n.stats.StoreErrors.Add(1)
			n.writeReply(m.msg, m.start, bus.StatusStoreError, err.Error())
			if !isBusy(err) {
				n.fail(err)
			}
			return
		}
		n.writeReply(m.msg, m.start, bus.StatusOK, "")
	})
}

func (a *ownerActor) count(s core.Status) {
	st := &a.node.stats
	switch s {
	case core.StatusOK:
		st.Writes.Add(1)
	case core.StatusConflict:
		st.Conflicts.Add(1)
	case core.StatusSealed:
		st.Sealed.Add(1)
	case core.StatusClockAhead:
		st.ClockAhead.Add(1)
	case core.StatusBadRequest:
		st.BadRequests.Add(1)
		st.Mismatches.Add(1) // the request's offset disagrees with its shard's (node_guard.go) or the topic's offset grid
	}
}

// scan carries out core.Owner.Scan: persist the raised seal (which is also
// a barrier: every write accepted before it is durable and visible), then
// read the page on a scan worker and reply.
func (a *ownerActor) scan(m *slotRequest) {
	n := a.node
	q := *m.scan
	if q.To > a.lo+core.RangeNanos {
		n.scanError(m.msg, bus.StatusBadRequest, fmt.Sprintf("scan [%d,%d) crosses the range boundary %d", q.From, q.To, a.lo+core.RangeNanos))
		return
	}
	a.refreshRepaired() // repair_write.go: what repair has filled below the birth
	var d core.ScanDecision
	if q.Close {
		a.core.RaiseFloor(n.floorUsed())
		d = a.core.Close(n.closeClock(n.cfg.Now(), a.core.Accept()), q.From, q.To)
		q.To = d.Closed // read and page up to what the node closed
	} else {
		d = a.core.Scan(n.cfg.Now(), q.From, q.To, q.Seal)
	}
	if d.Status != core.StatusOK {
		n.scanError(m.msg, bus.Status(d.Status), d.Detail)
		return
	}
	n.stats.Scans.Add(1)
	n.metrics.Scan()
	b := &slotstore.Batch{}
	if d.PersistSeal {
		b.SetSeal(a.topic.Name, a.partition, a.lo, d.Seal)
	}
	a.inflight.Add(1)
	n.commit(b, func(err error) {
		defer a.inflight.Add(-1)
		if err != nil {
			n.scanError(m.msg, bus.StatusStoreError, err.Error())
			if !isBusy(err) {
				n.fail(err)
			}
			return
		}
		if d.PersistSeal {
			n.metrics.SealRaised()
		}
		// Never wait for a scan worker here: this runs on the store's
		// committer goroutine, which must not be held up.
		n.scanWG.Add(1)
		go func() {
			defer n.scanWG.Done()
			n.scans <- struct{}{}
			defer func() { <-n.scans }()
			n.readPage(m, q, d)
		}()
	})
}

// readPage reads one page of [q.From, q.To) and replies. Runs on a scan
// worker goroutine, never inside an actor.
func (n *Node) readPage(m *slotRequest, q bus.ScanReq, d core.ScanDecision) {
	budget := q.Budget(int(n.cfg.Conn.MaxPayload()))
	pb := bus.NewScanReplyBuilder(budget)
	next := q.To
	err := n.cfg.Store.Scan(q.Topic, q.Partition, q.From, q.To, func(off uint64, shard []byte) bool {
		if q.HeadersOnly && len(shard) > stripe.HeaderSize {
			shard = shard[:stripe.HeaderSize]
		}
		if perr := pb.Add(off, append([]byte(nil), shard...)); perr != nil {
			next = off
			return false
		}
		return true
	})
	if err != nil {
		n.storeError("scan", err)
		n.scanError(m.msg, bus.StatusStoreError, err.Error())
		return
	}
	birth := m.topic.BirthFor(n.cfg.Store.Incarnation().Birth)
	status := bus.StatusOK
	if d.Unknown {
		status = bus.StatusUnknown
	}
	var after uint64
	if q.Probe && next == q.To {
		after, err = n.firstAfter(q)
		if err != nil {
			n.storeError("scan", err)
			n.scanError(m.msg, bus.StatusStoreError, err.Error())
			return
		}
	}
	seal := d.Seal
	if q.Close {
		seal = d.Closed // a closing scan's answer: where the node closed the range
	}
	n.respond(m.msg, pb.Reply(bus.ScanReply{Status: status, NodeClock: n.cfg.Now(), Seal: seal, Birth: birth, Next: next, After: after}).Marshal())
}

func isBusy(err error) bool { return err != nil && errors.Is(err, slotstore.ErrBusy) }

// firstAfter returns the first occupied offset at or after q.To in the
// partition (0 if none): one LevelDB seek, so a reader far behind can skip
// empty time instead of scanning it second by second.
func (n *Node) firstAfter(q bus.ScanReq) (uint64, error) {
	var after uint64
	err := n.cfg.Store.Scan(q.Topic, q.Partition, q.To, math.MaxUint64, func(off uint64, _ []byte) bool {
		after = off
		return false
	})
	return after, err
}
