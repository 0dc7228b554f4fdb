package server_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/node"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestStartNodeReplace: a dead node's ensemble positions are taken over by
// a new node started with Replace (raidq node --replace OLD_ID) on an empty
// data directory. Only the metadata changes; repair refills the positions,
// so that with the replacement and one original node left (n=3, k=2) every
// message sent before the replacement is still read back. A replace of a
// live node is refused.
func TestStartNodeReplace(t *testing.T) {
	if testing.Short() {
		t.Skip("clustered JetStream takes a few seconds to elect")
	}
	log := testkit.Logger(t, slog.LevelWarn)
	const servers = 3
	repair := node.RepairConfig{Interval: 100 * time.Millisecond, Margin: 200 * time.Millisecond, ScrubInterval: -1}
	// nodes[servers] is the replacement: a client of s0's server, stopped
	// first (startMesh's cleanup stops s0 to s2 after it).
	nodes := append(startMesh(t, log, "rep", servers, server.NodeOptions{Repair: repair}), nil)
	t.Cleanup(func() {
		if n := nodes[servers]; n != nil {
			_ = n.Stop(context.Background())
		}
	})
	base := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitMembers(ctx, t, nodes, "s0", "s1", "s2")
	p := quorum.Default()
	p.N, p.K, p.W = 3, 2, 2
	if _, err := nodes[0].Meta().CreateTopic(ctx, meta.TopicSpec{Name: "orders", Partitions: 1, Params: p}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[:servers] {
		testkit.WaitFor(t, "node "+n.ID()+" to learn the topic", func() bool {
			_, err := n.Catalog().Topic("orders")
			return err == nil
		})
	}

	// A client on s0, the server that stays up.
	nc, err := nats.Connect(nodes[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := raidq.ConnectConn(nc, raidq.WithCluster("rep"), raidq.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	from := time.Now()
	const total = 200
	sendNumbered(ctx, t, c, "orders", total)

	sent := time.Now()
	newNode := func(replace string) (*server.Node, error) {
		return server.StartNode(server.NodeOptions{ID: "s9", DataDir: filepath.Join(base, "9-"+replace), Cluster: "rep",
			NATSURL: nodes[0].ClientURL(), Insecure: true, NoSync: true, MetaTimeout: 20 * time.Second, Logger: log,
			Repair: repair, Replace: replace})
	}
	// s1 is alive: refused, nothing changed.
	if n, err := newNode("s1"); err == nil {
		_ = n.Stop(ctx)
		t.Fatal("replacing a live node was allowed")
	} else if !errors.Is(err, meta.ErrReplace) || !strings.Contains(err.Error(), "alive") {
		t.Fatalf("replacing a live node: %v, want ErrReplace naming it alive", err)
	}

	// s2 dies; its member record is gone as after ReplaceQuiet.
	if err := nodes[2].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	nodes[2] = nil
	// s2's server may have led the metadata stream (or JetStream's meta
	// group): a write sent while s0 and s1 take over can go unanswered,
	// and it then fails only when the store's 5 s timeout ends, although
	// the next one is answered at once. So retry until the delete is
	// acknowledged, as StartNode's replace does with its writes; deleting
	// the key twice is harmless.
	testkit.WaitFor(t, "the metadata to take the removal of s2's member record", func() bool {
		err := nodes[0].Meta().RemoveMember(ctx, "s2")
		if err != nil {
			t.Logf("removing s2's member record, retrying: %v", err)
		}
		return err == nil
	})
	// The replacement judges s2 dead from the member records it reads:
	// wait until no live replica lists s2's any more.
	waitMembers(ctx, t, nodes, "s0", "s1")
	nodes[servers], err = newNode("s2")
	if err != nil {
		t.Fatalf("replace s2: %v", err)
	}
	// StartNode returned once s9's catalog showed the change. That catalog
	// is fed by a consumer on any replica of the metadata, while a read
	// through s0 is answered by s0's replica, which may apply the
	// committed update a moment later: wait for it there, then check it.
	var rec meta.TopicRecord
	testkit.WaitFor(t, "the metadata read through s0 to show s9", func() bool {
		var err error
		rec, err = nodes[0].Meta().Topic(ctx, "orders")
		return err == nil && slices.Contains(rec.Ensembles[0], "s9")
	})
	if slices.Contains(rec.Ensembles[0], "s2") || len(rec.Ensembles[0]) != servers {
		t.Fatalf("ensemble after replace: %v", rec.Ensembles[0])
	}
	testkit.WaitFor(t, "s0's catalog to show s9", func() bool {
		tp, err := nodes[0].Catalog().Topic("orders")
		return err == nil && slices.Contains(tp.Ensembles[0], "s9")
	})
	// Repair looks only at offsets older than the read delay plus its
	// margin: count passes from when the last send is that old.
	st := nodes[servers].Stats()
	horizon := sent.Add(p.ReadDelay + repair.Margin)
	passes := int64(-1)
	testkit.WaitFor(t, "repair to refill the replacement", func() bool {
		if passes < 0 {
			if time.Now().After(horizon) {
				passes = st.RepairPasses.Load()
			}
			return false
		}
		return st.RepairPasses.Load() > passes+1 && st.StripesBelowN.Load() == 0 && st.RepairPending.Load() == 0
	})
	t.Logf("replacement repaired %d shards in %d passes", st.ShardsRepaired.Load(), st.RepairPasses.Load())
	if st.ShardsRepaired.Load() < total/2 {
		t.Fatalf("repaired %d shards for %d messages", st.ShardsRepaired.Load(), total)
	}

	// The reading client must know the new ensemble before s1 stops: with
	// s1 and s2 gone the metadata has no quorum, and a client's catalog
	// keeps what it last read. c may not know it yet: its catalog's watch
	// is a consumer on one server, s2 perhaps, and then only its poll
	// (every meta.CatalogRefresh) brings the change. So wait until every
	// live server's replica of the metadata has the new ensemble and read
	// with a new client, whose catalog loads it when it connects.
	testkit.WaitFor(t, "the metadata read through s0 and s1 to show s9", func() bool {
		for _, n := range nodes[:2] { // s9 is a client of s0's server
			rec, err := n.Meta().Topic(ctx, "orders")
			if err != nil || !slices.Contains(rec.Ensembles[0], "s9") {
				return false
			}
		}
		return true
	})
	rc, err := raidq.ConnectConn(nc, raidq.WithCluster("rep"), raidq.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()

	// s1 stops too: s0 and the replacement must decode everything.
	if err := nodes[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	nodes[1] = nil
	consumeNumbered(ctx, t, rc, "orders", from, total)
}
