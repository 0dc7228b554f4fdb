package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/slotstore"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestNodeRefusesOffGrid: on a topic with an offset grid
// (docs/design.md#kafka-offsets) a write off it is BAD_REQUEST, naming the
// grid, and stores nothing; on the grid it is OK. A producer older than
// the grid fails loudly instead of storing what Kafka offsets cannot name.
func TestNodeRefusesOffGrid(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := quorum.Default()
	p.Grid = quorum.DefaultGrid
	tp := &meta.Topic{Name: "gridded", Partitions: 1, Params: p, Created: e.topic.Created,
		Ensembles: [][]string{{"a", "b", testNode, "c", "d", "e"}}}
	mustPut(t, e.cat, tp)
	on := p.GridUp(midTime + 10*ms)
	bad := e.node.Stats().BadRequests.Load()
	for _, c := range []struct {
		off  uint64
		want bus.Status
	}{{on + 1, bus.StatusBadRequest}, {on + p.Grid/2, bus.StatusBadRequest}, {on - 1, bus.StatusBadRequest}, {on, bus.StatusOK}} {
		req := bus.WriteReq{Topic: tp.Name, Partition: 0, Offset: c.off, Shard: shards(t, 1, c.off, 400)[2].Marshal()}
		r := decodeWrite(t, e.request(e.subj.Slot(testNode, tp.Name, 0), req.Marshal()))
		expectStatus(t, "write", r.Status, c.want, r.Detail)
		_, err := e.mem.Get(slotstore.Key{Topic: tp.Name, Partition: 0, Offset: c.off})
		if c.want == bus.StatusBadRequest && (!strings.Contains(r.Detail, "offset grid") || !errors.Is(err, slotstore.ErrNotFound)) {
			t.Fatalf("offset %d: refusal %q does not name the grid, or the slot was stored (%v)", c.off, r.Detail, err)
		}
	}
	if got := e.node.Stats().BadRequests.Load() - bad; got != 3 {
		t.Fatalf("%d bad requests counted, want 3", got)
	}
}
