package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe"
)

// Re-append of in-doubt stripes (docs/design.md#read-path): a reader that skipped an
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
	var unsub func()
	return func(start bool) {
		if !start {
			if unsub != nil {
				unsub()
				unsub = nil
			}
			return
		}
		var err error
		unsub, err = m.io.Subscribe(m.subjects.InDoubtAll(), m.onInDoubt)
		if err != nil {
			m.log.Warn("repair: cannot subscribe to in-doubt reports", "err", err)
		}
	}
}

// onInDoubt queues a reader's report for a partition this node holds.
func (m *maintenance) onInDoubt(subject string, data []byte) {
	r, err := bus.DecodeInDoubt(data)
	if err != nil {
		return
	}
	t, err := m.io.Catalog().Topic(r.Topic)
	if err != nil || int(r.Partition) >= t.Partitions || t.Position(r.Partition, m.id) < 0 {
		return
	}
	if want := m.subjects.InDoubt(r.Topic, r.Partition); subject != want {
		return // the subject names another topic than the payload
	}
	if r.To != "" && r.To != m.id {
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
		if err := m.io.Publish(m.subjects.InDoubt(t.Name, k.partition), r.Marshal()); err != nil {
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
	m.stats.ReAppended.Add(1)
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
	if b, err := m.io.Get(slotstore.Key{Topic: t.Name, Partition: p, Offset: off}); err == nil {
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
// ensemble, with a producer's rules and a producer's driver: the client's
// Reappend (actors.Client.Reappend: core.Writer with the topic's default
// write rules, offset from this node's clock, retries at fresh offsets,
// ack at W, sent over the client's links, which track each node's
// health). It returns the committed offset.
func (m *maintenance) reappend(ctx context.Context, t *meta.Topic, p uint32, id stripe.ID, payload []byte) (uint64, error) {
	return m.io.Reappend(ctx, t, p, id, payload)
}

// peerClient is the client a node reaches its peers through: repair's
// scans and shard fetches, the clock watch's status requests
// (actors.Client.Request, over the client's links, which track each
// peer's health) and re-appends. It is Config.Client, or one the node
// makes on first use from its own connection, catalog, logger and clock,
// and closes when it stops. Safe for concurrent use (repair's goroutines,
// the clock watch).
type peerClient struct {
	mu     sync.Mutex
	c      *actors.Client
	own    bool // made here: closed by close
	closed bool
}

// get returns the client, making the node's own on first use.
func (w *peerClient) get(n *Node) (*actors.Client, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return nil, fmt.Errorf("node %s: peer client: %w", n.cfg.ID, core.ErrClosed)
	case w.c != nil:
		return w.c, nil
	case n.cfg.Client != nil:
		w.c = n.cfg.Client
		return w.c, nil
	}
	c, err := actors.NewClient(actors.ClientConfig{Cluster: n.cfg.Cluster, Conn: n.cfg.Conn, Catalog: n.cfg.Catalog,
		Logger: n.cfg.Logger, Now: n.cfg.Now})
	if err != nil {
		return nil, fmt.Errorf("node %s: peer client: %w", n.cfg.ID, err)
	}
	w.c, w.own = c, true
	return c, nil
}

// close closes the node's own client (not a given one); get fails after it.
func (w *peerClient) close() {
	w.mu.Lock()
	c, own := w.c, w.own
	w.c, w.closed = nil, true
	w.mu.Unlock()
	if own {
		c.Close()
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
