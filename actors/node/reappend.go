package node

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// Re-append of in-doubt stripes (DESIGN §5): a reader that skipped an
// offset as in doubt publishes it on raidq.<cluster>.indoubt.<topic>.<p>;
// the repair loop of every node of the partition's ensemble queues it and
// looks again on each pass. Once the stripe proves decodable there (a dead
// node came back, say), the node at the lowest ensemble position that
// answered writes it again as a producer would: the same stripe id at a
// fresh offset (its clock), all n shards, acked at W. Readers dedupe by
// stripe id, so it is delivered late rather than lost. A node that is not
// the lowest hands the report to the lowest (bus.InDoubtReport.To): that
// node may well have been down when the reader published it.

// inDoubtSubscription returns the repair loop's start/stop hook that
// subscribes to the readers' in-doubt reports.
func (m *maintenance) inDoubtSubscription() func(start bool) {
	var sub *nats.Subscription
	return func(start bool) {
		if !start {
			if sub != nil {
				_ = sub.Unsubscribe()
				sub = nil
			}
			return
		}
		var err error
		sub, err = m.n.cfg.Conn.Subscribe(m.n.subjects.InDoubtAll(), m.onInDoubt)
		if err != nil {
			m.log.Warn("repair: cannot subscribe to in-doubt reports", "err", err)
		}
	}
}

// onInDoubt queues a reader's report for a partition this node holds.
func (m *maintenance) onInDoubt(msg *nats.Msg) {
	r, err := bus.DecodeInDoubt(msg.Data)
	if err != nil {
		return
	}
	t, err := m.n.cfg.Catalog.Topic(r.Topic)
	if err != nil || int(r.Partition) >= t.Partitions || t.Position(r.Partition, m.n.cfg.ID) < 0 {
		return
	}
	if want := m.n.subjects.InDoubt(r.Topic, r.Partition); msg.Subject != want {
		return // the subject names another topic than the payload
	}
	if r.To != "" && r.To != m.n.cfg.ID {
		return // handed to another node
	}
	id := stripe.ID{Producer: r.Producer, Seq: r.Seq}
	m.addTarget(targetKey{topic: r.Topic, partition: r.Partition, offset: r.Offset}, false, &id)
}

// resolveInDoubt looks for the reported stripe at its offset; true when
// the report is done with (re-appended, left to the lowest live node, or
// given up after InDoubtKeep).
func (m *maintenance) resolveInDoubt(ctx context.Context, t *meta.Topic, k targetKey, tg target, rc core.RepairConfig, local []core.LocalSlot, peers []core.PeerScan) bool {
	ref, members, heard := core.StripeAt(rc, k.offset, tg.id, local, peers)
	if len(members) < t.Params.K {
		if allHeard(t.Params.N, rc.Pos, peers) {
			// Every node answered for the offset in full and fewer than k
			// hold the stripe there: it was never committed (its producer
			// retried elsewhere) and can never become decodable.
			m.log.Info("repair: in-doubt stripe was never committed at its offset (every node answered)", "topic", t.Name,
				"partition", k.partition, "offset", k.offset, "stripe", tg.id.String(), "shards", len(members))
			return true
		}
		if time.Since(tg.first) > m.cfg.InDoubtKeep {
			m.log.Warn("repair: in-doubt stripe never became decodable; giving up", "topic", t.Name, "partition", k.partition,
				"offset", k.offset, "stripe", tg.id.String(), "shards", len(members))
			return true
		}
		return false
	}
	if heard[0] != rc.Pos {
		// The lowest live position re-appends it: hand it over (it may
		// not have the report), on handoffPasses passes in case it was
		// not listening yet, then forget it here.
		to := t.Ensembles[k.partition][heard[0]]
		r := bus.InDoubtReport{Topic: t.Name, Partition: k.partition, Offset: k.offset, Producer: tg.id.Producer, Seq: tg.id.Seq, To: to}
		if err := m.n.cfg.Conn.Publish(m.n.subjects.InDoubt(t.Name, k.partition), r.Marshal()); err != nil {
			return false
		}
		return m.handedOff(k) >= handoffPasses
	}
	if m.recentlyReappended(tg.id) {
		return true // another report of the same stripe
	}
	payload, err := m.stripePayload(ctx, t, k.partition, rc, k.offset, ref, members)
	if err != nil {
		m.log.Warn("repair: cannot decode in-doubt stripe", "topic", t.Name, "partition", k.partition, "offset", k.offset, "err", err)
		return false
	}
	off, err := m.reappend(ctx, t, k.partition, tg.id, payload)
	if err != nil {
		m.log.Warn("repair: re-append of an in-doubt stripe failed", "topic", t.Name, "partition", k.partition,
			"offset", k.offset, "stripe", tg.id.String(), "err", err)
		return false
	}
	m.n.stats.ReAppended.Add(1)
	m.rememberReappend(tg.id)
	m.log.Info("repair: re-appended an in-doubt stripe that proved decodable", "topic", t.Name, "partition", k.partition,
		"stripe", tg.id.String(), "old_offset", k.offset, "new_offset", off)
	return true
}

// stripePayload decodes the stripe of group ref at off from k shards:
// this node's own, if it has one, and fetched ones.
func (m *maintenance) stripePayload(ctx context.Context, t *meta.Topic, p uint32, rc core.RepairConfig, off uint64,
	ref stripe.ShardHeader, members []int) ([]byte, error) {
	shards := make([]*stripe.Shard, t.Params.N)
	have := 0
	if b, err := m.n.cfg.Store.Get(slotstore.Key{Topic: t.Name, Partition: p, Offset: off}); err == nil {
		if s, err := stripe.Parse(b); err == nil && s.SameStripe(&ref) && int(s.Index) == rc.Pos {
			shards[rc.Pos] = &s
			have++
		}
	}
	for _, pos := range members {
		if have >= t.Params.K || pos == rc.Pos {
			continue
		}
		raw, err := m.fetchShard(ctx, t, p, pos, off)
		if err != nil {
			continue
		}
		s, err := stripe.Parse(raw)
		if err != nil || !s.SameStripe(&ref) || int(s.Index) != pos {
			continue
		}
		shards[pos] = &s
		have++
	}
	return stripe.Decode(shards)
}

// reappend writes payload as stripe id at a fresh offset on the whole
// ensemble, with a producer's rules (core.Writer: offset from this node's
// clock, retries at fresh offsets, ack at W). It returns the committed
// offset.
func (m *maintenance) reappend(ctx context.Context, t *meta.Topic, p uint32, id stripe.ID, payload []byte) (uint64, error) {
	wc := core.DefaultWriterConfig(t.Params)
	wc.Nodes = t.Ensembles[p]
	w := core.NewWriter(wc)
	seed := uint64(m.n.cfg.Now()) ^ id.Seq
	rnd := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	timeout := max(2*time.Duration(wc.AttemptTimeout), 250*time.Millisecond)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type reply struct {
		att, node int
		status    core.Status
		clock     int64
	}
	replies := make(chan reply, t.Params.N)
	send := func(s core.Send) error {
		shards, err := stripe.Encode(id, s.Offset, t.Params.N, t.Params.K, payload)
		if err != nil {
			return err
		}
		for i, node := range t.Ensembles[p] {
			req := bus.WriteReq{Topic: t.Name, Partition: p, Offset: s.Offset, Shard: shards[i].Marshal()}
			subj := m.n.subjects.Slot(node, t.Name, p)
			go func() {
				r := reply{att: s.Attempt, node: i, status: core.StatusNoReply}
				rctx, rcancel := context.WithTimeout(cctx, timeout)
				defer rcancel()
				if msg, err := m.n.cfg.Conn.RequestWithContext(rctx, subj, req.Marshal()); err == nil {
					if wr, err := bus.DecodeWriteReply(msg.Data); err == nil {
						r.status, r.clock = core.Status(wr.Status), wr.NodeClock
					}
				}
				select {
				case replies <- r:
				case <-cctx.Done():
				}
			}()
		}
		return nil
	}
	if err := send(w.Start(m.n.cfg.Now(), id)); err != nil {
		return 0, err
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var acked uint64
	var failure error
	for {
		var effects []any
		select {
		case r := <-replies:
			effects = w.Reply(m.n.cfg.Now(), rnd, id, r.att, r.node, r.status, r.clock)
		case <-tick.C:
			effects = w.Tick(m.n.cfg.Now(), rnd)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		for _, e := range effects {
			switch e := e.(type) {
			case core.Send:
				if err := send(e); err != nil {
					return 0, err
				}
			case core.Ack:
				acked = e.Offset
			case core.Fail:
				failure = e.Err
			case core.Done:
				if acked != 0 {
					return acked, nil
				}
				if failure == nil {
					failure = fmt.Errorf("stripe %s: writer gave up", id)
				}
				return 0, failure
			}
		}
	}
}

// rememberReappend notes that id was re-appended, so that more reports of
// it (several readers, several hand-overs) do not write it again while
// they can still arrive (InDoubtKeep).
func (m *maintenance) rememberReappend(id stripe.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reappended == nil {
		m.reappended = make(map[stripe.ID]time.Time)
	}
	now := time.Now()
	for old, at := range m.reappended {
		if now.Sub(at) > m.cfg.InDoubtKeep {
			delete(m.reappended, old)
		}
	}
	m.reappended[id] = now
}

func (m *maintenance) recentlyReappended(id stripe.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.reappended[id]
	return ok && time.Since(at) <= m.cfg.InDoubtKeep
}

// allHeard says whether every other position answered a scan in full
// (no page unanswered, no "unknown" from a young incarnation).
func allHeard(n, self int, peers []core.PeerScan) bool {
	heard := 0
	for _, ps := range peers {
		if ps.Node != self && ps.Heard && ps.Complete {
			heard++
		}
	}
	return heard == n-1
}
