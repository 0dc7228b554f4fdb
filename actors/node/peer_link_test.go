package node

import (
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/slotstore"
)

// linkRecorder is a client whose NodeConn notes each node it starts a
// link to.
type linkRecorder struct {
	client *actors.Client
	mu     sync.Mutex
	linked []string
}

func (r *linkRecorder) nodes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.linked)
}

// restartWithClient kills node i and starts it again on its directory as
// it is, with a recording Config.Client; tweak adjusts the node's config.
func (c *repairCluster) restartWithClient(i int, tweak func(*Config)) *linkRecorder {
	c.t.Helper()
	c.kill(i)
	rn := c.nodes[i]
	st, err := slotstore.Open(rn.dir, slotstore.Options{Logger: c.log, NoSync: true})
	if err != nil {
		c.t.Fatal(err)
	}
	nc, err := c.srv.Connect("node-" + rn.id)
	if err != nil {
		c.t.Fatal(err)
	}
	r := &linkRecorder{}
	r.client, err = actors.NewClient(actors.ClientConfig{Cluster: testCluster, Conn: nc, Catalog: c.cat, Logger: c.log,
		NodeConn: func(node string) *nats.Conn {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.linked = append(r.linked, node)
			return nil // the client's connection
		}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(r.client.Close) // the caller stops the node before (Config.Client is not the node's to close)
	cfg := Config{ID: rn.id, Cluster: testCluster, Store: st, Conn: nc, Catalog: c.cat, Logger: c.log, Repair: rn.cfg, Client: r.client}
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := Start(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	rn.store, rn.nc, rn.node = st, nc, n
	return r
}

// peers are the ids of the nodes other than node i.
func (c *repairCluster) peers(i int) []string {
	return slices.DeleteFunc(c.ids(), func(id string) bool { return id == c.nodes[i].id })
}

// TestPeerRequestsUseClientLinks: a node's requests to its peers go
// through the links of its client (Config.Client), one per peer (the
// client's NodeConn is asked for each peer as its link starts): the birth
// of a wiped node's incarnation, repair's scans and fetches (which refill
// a wiped node), and the clock watch's status requests, each on its own.
func TestPeerRequestsUseClientLinks(t *testing.T) {
	c := newRepairCluster(t, fastRepair())
	tp := c.createTopic("orders", 1)
	c.produce(tp, 0, 300)
	linkedAll := func(r *linkRecorder, i int) bool {
		got := r.nodes()
		slices.Sort(got)
		return slices.Equal(got, c.peers(i)) // each once
	}

	t.Run("birth", func(t *testing.T) {
		const w = 0
		c.wipe(w)
		r := c.restartWithClient(w, func(cfg *Config) { cfg.Repair.Disabled, cfg.ClockBound = true, -1 })
		defer func() { c.stop(w); c.start(w) }() // back as the others are (it refills itself)
		if c.nodes[w].store.Incarnation().Provisional {
			t.Fatal("the incarnation's birth was not settled")
		}
		if !linkedAll(r, w) {
			t.Fatalf("birth asked the peers over links to %v, want one to each of %v", r.nodes(), c.peers(w))
		}
	})
	t.Run("repair", func(t *testing.T) {
		const w = 1
		held := len(c.slots(w, tp)[0])
		c.wipe(w)
		rn := c.nodes[w]
		cfg := rn.cfg
		rn.cfg.Disabled = true
		c.start(w) // born (without a recorder), then restarted on the settled directory
		rn.cfg = cfg
		r := c.restartWithClient(w, func(cfg *Config) { cfg.ClockBound = -1 })
		defer c.stop(w)
		testkit.WaitFor(t, "the wiped node refilled", func() bool { return len(c.slots(w, tp)[0]) >= held })
		if !linkedAll(r, w) {
			t.Fatalf("repair reached the peers over links to %v, want one to each of %v", r.nodes(), c.peers(w))
		}
	})
	t.Run("clock", func(t *testing.T) {
		const w = 2
		r := c.restartWithClient(w, func(cfg *Config) { cfg.Repair.Disabled = true })
		defer c.stop(w)
		testkit.WaitFor(t, "a clock pass over links to every peer", func() bool { return linkedAll(r, w) })
	})
}
