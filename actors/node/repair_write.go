package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// Repair writes: the node's own repair loop hands a rebuilt (and proven)
// shard to the slot owner of its range as an internal message, through
// the same actor tree as the wire's writes, so that the owner's
// single-threaded check-then-insert covers it too. The wire's repair flag
// stays refused (core.Owner.Write): nobody else can write below a seal.

// repairWriteLocal writes a rebuilt shard through its slot owner and
// waits for the answer (OK only once it is durable).
func (n *Node) repairWriteLocal(ctx context.Context, t *meta.Topic, p uint32, shard []byte) (bus.Status, string, error) {
	h, err := stripe.ParseHeader(shard)
	if err != nil {
		return 0, "", err
	}
	type answer struct {
		s      bus.Status
		detail string
	}
	ch := make(chan answer, 1)
	req := &slotRequest{topic: t, partition: p, shard: h,
		write:    &bus.WriteReq{Topic: t.Name, Partition: p, Offset: h.Offset, Repair: true, Shard: shard},
		repaired: func(s bus.Status, detail string) { ch <- answer{s, detail} }}
	sendToRouter(n.system.Root, n.root, req)
	select {
	case a := <-ch:
		return a.s, a.detail, nil
	case <-ctx.Done():
		return 0, "", ctx.Err()
	}
}

// repairWrite carries out core.Owner.RepairWrite. An occupied slot is read
// first: only bytes that fail their checks may be replaced.
func (a *ownerActor) repairWrite(m *slotRequest) {
	n := a.node
	off := m.write.Offset
	key := slotstore.Key{Topic: a.topic.Name, Partition: a.partition, Offset: off}
	corrupt := false
	if a.core.Occupied(off) {
		_, err := n.cfg.Store.Get(key)
		switch {
		case err == nil, errors.Is(err, slotstore.ErrNotFound): // good, or still in the commit queue
		case errors.Is(err, slotstore.ErrCorrupt):
			corrupt = true
		default:
			m.repaired(bus.StatusStoreError, err.Error())
			return
		}
	}
	d := a.core.RepairWrite(n.cfg.Now(), off, &m.shard, corrupt)
	if !d.Persist && !d.Barrier {
		m.repaired(bus.Status(d.Status), d.Detail)
		return
	}
	b := &slotstore.Batch{}
	switch {
	case d.Replace:
		b.ReplaceCorrupt(key, m.write.Shard)
	case d.Persist:
		b.PutSlot(key, m.write.Shard)
	}
	a.inflight.Add(1)
	n.commit(b, func(err error) {
		defer a.inflight.Add(-1)
		switch {
		case err == nil:
			m.repaired(bus.StatusOK, "")
		case isBusy(err):
			m.repaired(bus.StatusBusy, err.Error())
		case errors.Is(err, slotstore.ErrInvalid):
			// The store refused to overwrite bytes that proved good after
			// all: nothing was written.
			n.cfg.Logger.Error("repair write refused by the store", "slot", key.String(), "err", err)
			m.repaired(bus.StatusConflict, err.Error())
		default:
			n.stats.StoreErrors.Add(1)
			m.repaired(bus.StatusStoreError, err.Error())
			n.fail(fmt.Errorf("repair write %s: %w", key, err))
		}
	})
}

// refreshRepaired gives the owner the partition's repaired mark and holes
// before a scan, so that it answers "unknown" exactly where repair has not
// filled the time before the node's birth.
func (a *ownerActor) refreshRepaired() {
	if a.topic.BirthFor(a.node.cfg.Store.Incarnation().Birth) == 0 {
		return // the node has seen the whole topic
	}
	a.core.SetRepaired(a.node.maint.view(a.topic.Name, a.partition))
}
