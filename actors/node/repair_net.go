package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// Repair's requests to the other nodes: the ordinary scan requests of the
// read path (reader.go), without sealing (repair looks only at ranges
// beyond every accept window) and, to find what is missing, headers only.
// They go through the links of the node's client (peerClient), which
// track each peer's health.

// scanPeers scans [from, to) on every other node of the ensemble, in
// parallel. dead (optional) names nodes that timed out earlier in the same
// walk: they are not asked again, and nodes that time out now are added.
func (m *maintenance) scanPeers(ctx context.Context, t *meta.Topic, p uint32, pos int, from, to uint64, probe bool, dead map[string]bool) []core.PeerScan {
	ens := t.Ensembles[p]
	out := make([]core.PeerScan, 0, len(ens)-1)
	res := make([]core.PeerScan, len(ens))
	timedOut := make([]bool, len(ens))
	var wg sync.WaitGroup
	for i, node := range ens {
		res[i].Node = i
		if i == pos || dead[node] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], timedOut[i] = m.scanPeer(ctx, node, i, t.Name, p, from, to, probe, false)
		}()
	}
	wg.Wait()
	for i := range ens {
		if i == pos {
			continue
		}
		if timedOut[i] && dead != nil {
			dead[ens[i]] = true
		}
		out = append(out, res[i])
	}
	return out
}

// scanPeer runs every page of a headers-only scan (full: whole shards) on
// one node. The second result says the node timed out (not merely absent:
// no responders).
func (m *maintenance) scanPeer(ctx context.Context, node string, pos int, topic string, p uint32, from, to uint64, probe, full bool) (core.PeerScan, bool) {
	res := core.PeerScan{Node: pos}
	subj := m.subjects.Scan(node, topic, p)
	complete := true
	for cur := from; cur < to; {
		req := bus.ScanReq{Topic: topic, Partition: p, From: cur, To: to, HeadersOnly: !full, Probe: probe}
		rep, size, err := m.request(ctx, node, subj, req)
		if err != nil {
			return res, errors.Is(err, actors.ErrLinkTimeout) || errors.Is(err, context.DeadlineExceeded)
		}
		if (rep.Status != bus.StatusOK && rep.Status != bus.StatusUnknown) || rep.Next <= cur || rep.Next > to {
			return res, false
		}
		if rep.Status == bus.StatusUnknown {
			complete = false
		}
		for _, e := range rep.Entries {
			res.Entries = append(res.Entries, core.Entry{Offset: e.Offset, Shard: e.Shard})
		}
		res.After, res.Clock = rep.After, rep.NodeClock
		cur = rep.Next
		if m.rate.wait(ctx, size) != nil {
			return res, false
		}
	}
	res.Heard, res.Complete = true, complete
	return res, false
}

// fetchShard reads the whole shard at off from the node at ensemble
// position pos (a scan of [off, off+1)).
func (m *maintenance) fetchShard(ctx context.Context, t *meta.Topic, p uint32, pos int, off uint64) ([]byte, error) {
	node := t.Ensembles[p][pos]
	req := bus.ScanReq{Topic: t.Name, Partition: p, From: off, To: off + 1}
	rep, size, err := m.request(ctx, node, m.subjects.Scan(node, t.Name, p), req)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	if err := m.rate.wait(ctx, size); err != nil {
		return nil, err
	}
	if rep.Status != bus.StatusOK && rep.Status != bus.StatusUnknown {
		return nil, fmt.Errorf("node %s answered %s: %s", node, rep.Status, rep.Detail)
	}
	if len(rep.Entries) != 1 || rep.Entries[0].Offset != off {
		return nil, fmt.Errorf("node %s has no shard at %d", node, off)
	}
	return rep.Entries[0].Shard, nil
}

// request sends one scan request to node, through the node's client's
// link to it (peerClient), and decodes the reply; size is the reply's
// length (for the rate limit). RequestTimeout bounds it (a timeout is an
// actors.ErrLinkTimeout).
func (m *maintenance) request(ctx context.Context, node, subj string, req bus.ScanReq) (bus.ScanReply, int, error) {
	data, err := m.io.Request(ctx, node, subj, req.Marshal(), m.cfg.RequestTimeout)
	if err != nil {
		return bus.ScanReply{}, 0, err
	}
	rep, err := bus.DecodeScanReply(data)
	return rep, len(data), err
}

// Prefetching: a range with many fixes (a wiped or long-dead node) would
// cost k shard requests per fix; instead the sources are scanned once for
// the span of the fixes, whole shards, and rebuild takes them from there.
const (
	prefetchMinFixes = 8
	prefetchMaxBytes = 32 << 20 // estimated bytes of one range's prefetch
)

// shardCache holds prefetched whole shards by ensemble position and
// offset; read-only once built (rebuild goroutines share it).
type shardCache map[int]map[uint64][]byte

func (c shardCache) get(pos int, off uint64) ([]byte, bool) {
	b, ok := c[pos][off]
	return b, ok
}

// prefetch scans, in parallel, every position that is among the first k
// sources of some fix, over the span of the fixes, and keeps the shards at
// the fixes' offsets. Nil when there are too few fixes or too many bytes;
// a failed scan just leaves that position out (rebuild fetches instead).
func (m *maintenance) prefetch(ctx context.Context, t *meta.Topic, p uint32, fixes []core.Fix) shardCache {
	if len(fixes) < prefetchMinFixes {
		return nil
	}
	want := make(map[int]map[uint64]bool)
	lo, hi := fixes[0].Offset, fixes[0].Offset
	var bytes int64
	for _, f := range fixes {
		lo, hi = min(lo, f.Offset), max(hi, f.Offset)
		for _, pos := range f.Sources[:min(t.Params.K, len(f.Sources))] {
			if want[pos] == nil {
				want[pos] = make(map[uint64]bool)
			}
			want[pos][f.Offset] = true
			bytes += int64(f.Group.PayloadLen)/int64(t.Params.K) + 64
		}
	}
	if bytes > prefetchMaxBytes {
		return nil
	}
	cache := make(shardCache, len(want))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for pos, offs := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps, _ := m.scanPeer(ctx, t.Ensembles[p][pos], pos, t.Name, p, lo, hi+1, false, true)
			got := make(map[uint64][]byte, len(offs))
			for _, e := range ps.Entries {
				if offs[e.Offset] {
					got[e.Offset] = e.Shard
				}
			}
			mu.Lock()
			cache[pos] = got
			mu.Unlock()
		}()
	}
	wg.Wait()
	return cache
}
