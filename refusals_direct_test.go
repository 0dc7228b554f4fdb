package raidq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestRefusalOnDirectConnection: a producer's shards go over direct
// connections to the nodes' own NATS servers (WithDirectNodes, the
// default), so a refused write is reported there, not on the connection
// the client dialed. A partition whose ensemble leaves out the dialed
// server's node is refused on direct connections only; its send still
// ends with ErrPermissionDenied at the refusal.
func TestRefusalOnDirectConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four nodes, each with its NATS server")
	}
	auth, err := natsserver.ParseAuthConfig([]byte(`
users: [
  {user: ops, password: opspw, roles: [admin]}
  {user: shop, password: shoppw, producer: [orders]}
]
routes: {user: route, password: routepw}`))
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 4
	ports, err := cluster.FreePorts(2 * nodes)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for i := range nodes {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[nodes+i]))
	}
	dir := t.TempDir()
	ns := make([]*server.Node, nodes)
	errs := make([]error, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns[i], errs[i] = server.StartNodeContext(ctx, server.NodeOptions{ID: fmt.Sprintf("n%d", i),
				DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i)), Cluster: "direct",
				Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[nodes+i]),
				Routes: routes, Auth: auth, NoSync: true, MetaTimeout: 90 * time.Second, Logger: testkit.Logger(t, slog.LevelError)})
		}()
	}
	wg.Wait()
	for _, n := range ns {
		if n != nil {
			t.Cleanup(func() { _ = n.Close() })
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// The client dials n0's server only; the others are reached directly.
	url := ns[0].ClientURL()
	connect := func(user string) *raidq.Client {
		c, err := raidq.Connect(url, raidq.WithCluster("direct"), raidq.WithUserPassword(user, user+"pw"),
			raidq.WithTimeout(10*time.Second), raidq.WithLogger(testkit.Logger(t, slog.LevelError)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	admin := connect("ops")
	p := raidq.DefaultParams()
	p.N, p.K, p.W = 3, 2, 2
	var info raidq.TopicInfo
	testkit.WaitFor(t, "every node a member, so topic payments spreads over all four", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		info, err = admin.CreateTopic(cctx, raidq.TopicConfig{Name: "payments", Partitions: 8, Params: p})
		if err != nil {
			t.Logf("create payments: %v", err)
			return false
		}
		var all []string
		for _, e := range info.Ensembles {
			all = append(all, e...)
		}
		if n := len(slices.Compact(slices.Sorted(slices.Values(all)))); n < nodes {
			_ = admin.DeleteTopic(cctx, "payments")
			return false
		}
		return true
	})
	part := slices.IndexFunc(info.Ensembles, func(e []string) bool { return !slices.Contains(e, "n0") })
	if part < 0 {
		t.Fatalf("every partition's ensemble holds n0: %v", info.Ensembles)
	}
	shop := connect("shop")
	if err := shop.WaitTopic(ctx, "payments"); err != nil {
		t.Fatal(err)
	}
	pr, err := shop.Producer("payments", raidq.WithDeliveryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	sctx, scancel := context.WithTimeout(ctx, refusalBound)
	defer scancel()
	_, err = pr.SendTo(sctx, part, raidq.Message{Value: []byte("forged")})
	checkRefusal(t, fmt.Sprintf("send to partition %d (nodes %v)", part, info.Ensembles[part]), err,
		"user shop", `"raidq.direct.slot.`, ".payments.", "producer: [...]")
}
