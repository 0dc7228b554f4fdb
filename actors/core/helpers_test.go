package core

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/raidq/raidq/stripe"
	"github.com/raidq/raidq/stripe/quorum"
)

// Shared fixtures for the core tests: the default 6/4/4 topic, stripe ids,
// encoded shards and a tiny cluster of owners for one range.

const (
	ms   = int64(time.Millisecond)
	base = uint64(1_700_000_000) * RangeNanos // a range start, far from zero
)

func params() quorum.Params { return quorum.Default() }

// pid is producer p's id (byte 0 = p+1 so it is never the zero id).
func pid(p int) stripe.ProducerID {
	var id stripe.ProducerID
	id[0] = byte(p + 1)
	return id
}

func sid(p int, seq uint64) stripe.ID { return stripe.ID{Producer: pid(p), Seq: seq} }

// values are the record values of stripe id: "p<p>-s<seq>-r<i>".
func values(id stripe.ID, recs int) []string {
	out := make([]string, recs)
	for i := range out {
		out[i] = fmt.Sprintf("p%d-s%d-r%d", id.Producer[0]-1, id.Seq, i)
	}
	return out
}

// encode builds the n shards of a stripe of recs records for id at off.
func encode(t testing.TB, id stripe.ID, off uint64, recs int) []stripe.Shard {
	t.Helper()
	rs := make([]stripe.Record, recs)
	for i, v := range values(id, recs) {
		rs[i] = stripe.Record{Value: []byte(v)}
	}
	payload, err := stripe.AppendBatch(nil, rs)
	if err != nil {
		t.Fatal(err)
	}
	p := params()
	shards, err := stripe.Encode(id, off, p.N, p.K, payload)
	if err != nil {
		t.Fatal(err)
	}
	return shards
}

// cluster is n owners of the range [base, base+RangeNanos), one per node,
// and the bytes each accepted (as if made durable at once).
type cluster struct {
	owners []*Owner
	disk   world
}

func newCluster(n int) *cluster {
	c := &cluster{disk: newWorld(n)}
	for range n {
		c.owners = append(c.owners, NewOwner(ownerCfg(), 0, nil))
	}
	return c
}

func ownerCfg() OwnerConfig {
	p := params()
	return OwnerConfig{Topic: "t", Partition: 0, Lo: base, Accept: int64(p.AcceptWindow), Future: int64(p.FutureBound)}
}

// write sends shard node of s to that node's owner at node time now.
func (c *cluster) write(now int64, node int, s []stripe.Shard) Status {
	d := c.owners[node].Write(now, s[node].Offset, &s[node].ShardHeader, false)
	if d.Persist {
		c.disk.put(s, node)
	}
	return d.Status
}

// committed returns, from the owners' slots, every (offset, stripe) that
// holds at least W shards: where the owners say stripes are committed.
func (c *cluster) committed() map[stripe.ID][]uint64 {
	count := map[uint64]map[stripe.ID]int{}
	for _, o := range c.owners {
		for off, si := range o.slots {
			if count[off] == nil {
				count[off] = map[stripe.ID]int{}
			}
			count[off][si.ID]++
		}
	}
	out := map[stripe.ID][]uint64{}
	for off, ids := range count {
		for id, n := range ids {
			if params().Committed(n) {
				out[id] = append(out[id], off)
			}
		}
	}
	return out
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// world is what each node durably holds: node -> offset -> marshalled shard.
type world []map[uint64][]byte

func newWorld(n int) world {
	w := make(world, n)
	for i := range w {
		w[i] = map[uint64][]byte{}
	}
	return w
}

// put stores shards of s on the listed nodes.
func (w world) put(s []stripe.Shard, nodes ...int) {
	for _, i := range nodes {
		w[i][s[i].Offset] = s[i].Marshal()
	}
}

// answer runs sc against the world; nodes in deaf do not answer. The
// others closed the whole range (ask closeAt for less).
func (w world) answer(sc Scan, deaf ...int) []NodeResult {
	var out []NodeResult
	for _, i := range sc.Nodes {
		if contains(deaf, i) {
			out = append(out, NodeResult{Node: i})
			continue
		}
		res := NodeResult{Node: i, Heard: true, Closed: sc.To}
		for off, b := range w[i] {
			if off >= sc.From && off < sc.To {
				res.Entries = append(res.Entries, Entry{Offset: off, Shard: b})
			}
		}
		sort.Slice(res.Entries, func(a, b int) bool { return res.Entries[a].Offset < res.Entries[b].Offset })
		out = append(out, res)
	}
	return out
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
