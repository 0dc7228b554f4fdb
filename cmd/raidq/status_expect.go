package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// expectedSet is what the metadata says should answer `raidq status`:
// every member record and every node named in an ensemble. A node leaves
// it only through `raidq node --replace` (its member record is removed
// and its positions go to the new node).
type expectedSet struct {
	members []string
	topics  []meta.TopicRecord
	// err is why the metadata could not be read (nil: it was); status
	// then falls back to the nodes that answer the ping.
	err error
}

// ids are the expected node ids, sorted, without repeats.
func (e expectedSet) ids() []string {
	ids := slices.Clone(e.members)
	for _, t := range e.topics {
		for _, ens := range t.Ensembles {
			ids = append(ids, ens...)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// metaReadTimeout is the least status waits for the metadata.
const metaReadTimeout = 5 * time.Second

// readExpected reads the member records and topics within timeout. An
// unreadable metadata store is not an error of the call: it is reported
// in the set (err), because status still has the ping to show.
func readExpected(ctx context.Context, nc *nats.Conn, cluster string, timeout time.Duration) expectedSet {
	// JetStream stalls for seconds while a leader moves (a node just
	// died): give the metadata a few seconds even with a short --timeout.
	timeout = max(timeout, metaReadTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	store, err := meta.Open(ctx, nc, cluster, meta.Options{Timeout: timeout, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return expectedSet{err: err}
	}
	members, err := store.Members(ctx)
	if err != nil {
		return expectedSet{err: fmt.Errorf("member records: %w", err)}
	}
	topics, err := store.Topics(ctx)
	if err != nil {
		return expectedSet{err: fmt.Errorf("topic records: %w", err)}
	}
	e := expectedSet{topics: topics}
	for _, m := range members {
		e.members = append(e.members, m.ID)
	}
	return e
}

// serving: a node that answered and takes writes (a slow reply still
// does, and so does a degraded one: disk past the watermark, JetStream
// off; a failed store or a clock off its peers' does not).
func serving(n bus.NodeStatus) bool {
	return n.Health == bus.HealthOK || n.Health == bus.HealthSlow || n.Health == bus.HealthDegraded
}

// partitionDown is a partition with fewer than W of its ensemble serving:
// writes to it fail until enough of Down come back.
type partitionDown struct {
	Topic     string   `json:"topic"`
	Partition int      `json:"partition"`
	Serving   int      `json:"serving"`
	W         int      `json:"w"`
	Down      []string `json:"down"`
}

func (p partitionDown) String() string {
	return fmt.Sprintf("%s/%d: %d of %d needed nodes serving (down: %s)", p.Topic, p.Partition, p.Serving, p.W,
		strings.Join(p.Down, " "))
}

// statusVerdict judges the answers against the expected set.
type statusVerdict struct {
	// Missing are expected nodes (and found ones) that are not serving:
	// no answer, failed store, clock off.
	Missing []string `json:"missing,omitempty"`
	// Degraded are nodes that serve but need an operator (disk past the
	// watermark, JetStream off).
	Degraded []string `json:"degraded,omitempty"`
	// BelowW are the partitions that cannot commit a write now.
	BelowW []partitionDown `json:"partitions_below_w,omitempty"`
}

// judge is the pure part of status's exit code: which nodes are not
// serving and which partitions are left below W by them.
func judge(nodes []bus.NodeStatus, topics []meta.TopicRecord) statusVerdict {
	var v statusVerdict
	up := map[string]bool{}
	for _, n := range nodes {
		if n.Health == bus.HealthDegraded {
			v.Degraded = append(v.Degraded, n.Node)
		}
		if serving(n) {
			up[n.Node] = true
		} else {
			v.Missing = append(v.Missing, n.Node)
		}
	}
	for _, t := range topics {
		for p, ens := range t.Ensembles {
			d := partitionDown{Topic: t.Name, Partition: p, W: t.W}
			for _, id := range ens {
				if up[id] {
					d.Serving++
				} else {
					d.Down = append(d.Down, id)
				}
			}
			if d.Serving < t.W {
				v.BelowW = append(v.BelowW, d)
			}
		}
	}
	return v
}

// addPeers adds a "no answer" row for every node that the answering
// nodes' ensembles name (NodeStatus.Peers) but that has no row: when the
// metadata cannot be read, the nodes' cached catalogs still say who
// should be there. Sorted by node id.
func addPeers(nodes []bus.NodeStatus, timeout time.Duration) []bus.NodeStatus {
	have := map[string]bool{}
	for _, n := range nodes {
		have[n.Node] = true
	}
	cluster := ""
	for _, n := range nodes {
		cluster = cmp.Or(cluster, n.Cluster)
		for _, id := range n.Peers {
			if !have[id] && bus.ValidName("node id", id) == nil {
				have[id] = true
				nodes = append(nodes, bus.NodeStatus{Node: id, Cluster: cluster, Health: bus.HealthNoAnswer,
					Error: "named in an ensemble, not found within " + timeout.String()})
			}
		}
	}
	slices.SortFunc(nodes, func(a, b bus.NodeStatus) int { return strings.Compare(a.Node, b.Node) })
	return nodes
}
