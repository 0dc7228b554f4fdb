package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/localtest"
	"github.com/raidq/raidq/scenarios/testkit"
)

func TestStartNodeSecurityRefuses(t *testing.T) {
	log := testkit.Logger(t, slog.LevelWarn)
	dir := t.TempDir()
	tlsb, _, err := natsserver.EnsureDevTLS(filepath.Join(dir, "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := natsserver.ParseAuthConfig([]byte(`users: [{user: a, password: b, roles: [admin]}]`))
	if err != nil {
		t.Fatal(err)
	}
	base := server.NodeOptions{ID: "n1", DataDir: dir, Listen: "127.0.0.1:-1", Logger: log}
	cases := []struct {
		name string
		edit func(*server.NodeOptions)
		want string
		is   error
	}{
		{"neither auth nor insecure", func(o *server.NodeOptions) {}, "--auth FILE", server.ErrNoAuth},
		{"TLS alone is not authentication", func(o *server.NodeOptions) { o.TLS = tlsb.Files() }, "--insecure", server.ErrNoAuth},
		{"auth, clustered, routes unauthenticated", func(o *server.NodeOptions) {
			o.Auth, o.ClusterListen, o.Routes = auth, "127.0.0.1:-1", []string{"nats-route://127.0.0.1:1"}
		}, "routes between nodes must authenticate", nil},
		{"clustered TLS without a CA", func(o *server.NodeOptions) {
			o.Auth, o.ClusterListen = auth, "127.0.0.1:-1"
			o.TLS = &natsserver.TLSFiles{Cert: tlsb.Cert, Key: tlsb.Key}
		}, "--tls-ca", nil},
		{"a certificate without its key", func(o *server.NodeOptions) {
			o.Auth, o.TLS = auth, &natsserver.TLSFiles{Cert: tlsb.Cert}
		}, "--tls-key", nil},
		{"auth with --nats", func(o *server.NodeOptions) { o.Listen, o.NATSURL, o.Auth = "", "nats://127.0.0.1:1", auth }, "--nats", nil},
		{"--nats without credentials", func(o *server.NodeOptions) { o.Listen, o.NATSURL = "", "nats://127.0.0.1:1" }, "--nats-creds", server.ErrNoAuth},
	}
	for _, tc := range cases {
		o := base
		tc.edit(&o)
		_, err := server.StartNode(o)
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

// TestNodesWithAuth: three clustered nodes with an auth file and routes
// authenticated by the routes user (no TLS) form a cluster; the roles do
// their jobs without a permission violation anywhere; a server with a
// wrong route password is refused.
func TestNodesWithAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three clustered nodes")
	}
	log := testkit.Logger(t, slog.LevelWarn)
	dir := t.TempDir()
	auth, err := natsserver.ParseAuthConfig([]byte(`
users: [
  {user: ops, password: o, roles: [admin]}
  {user: app, password: a, producer: [orders], consumer: [orders]}
]
routes: {user: route, password: r0ute}`))
	if err != nil {
		t.Fatal(err)
	}
	ports, err := cluster.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	var routes, urls []string
	for i := range 3 {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
	}
	nodes := make([]*server.Node, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = server.StartNode(server.NodeOptions{ID: fmt.Sprintf("n%d", i), DataDir: filepath.Join(dir, fmt.Sprint(i)),
				Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[3+i]), Routes: routes,
				Auth: auth, NoSync: true, Logger: log, MetaTimeout: 90 * time.Second})
		}()
	}
	wg.Wait()
	for _, n := range nodes {
		if n != nil {
			t.Cleanup(func() { _ = n.Stop(context.Background()) })
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := strings.Join(urls, ",")
	admin, err := raidq.Connect(url, raidq.WithCluster(server.DefaultCluster), raidq.WithUserPassword("ops", "o"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	p := raidq.DefaultParams()
	p.N, p.K, p.W = 3, 2, 2
	waitMembers(ctx, t, nodes, "n0", "n1", "n2")
	if _, err := admin.CreateTopic(ctx, raidq.TopicConfig{Name: "orders", Partitions: 1, Params: p}); err != nil {
		t.Fatal(err)
	}
	app, err := raidq.Connect(urls[2], raidq.WithUserPassword("app", "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if err := app.WaitTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	prod, err := app.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	start := time.Now().Add(-time.Second)
	if _, err := prod.Send(ctx, raidq.Message{Value: []byte("over authenticated routes")}); err != nil {
		t.Fatal(err)
	}
	localtest.ReadN(t, app, "orders", 1, raidq.WithStart(start))

	// A route with the wrong password.
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[3]), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	_, _ = br.ReadString('\n')
	fmt.Fprintf(c, "CONNECT {\"user\":\"route\",\"pass\":\"guess\",\"verbose\":false,\"pedantic\":false}\r\nPING\r\n")
	for {
		l, err := br.ReadString('\n')
		if strings.HasPrefix(l, "PONG") {
			t.Fatal("a route with a wrong password was accepted")
		}
		if err != nil || strings.HasPrefix(l, "-ERR") {
			break
		}
	}
	for _, n := range nodes {
		if v := n.InternalViolations(); v != 0 {
			t.Errorf("node %s: %d permission violations on its own connections", n.ID(), v)
		}
	}
	// The refused login is counted by the server it dialled (n0's route
	// port) once that server has handled it.
	testkit.WaitFor(t, "the refused route login to be counted", func() bool {
		var auths int64
		for _, n := range nodes {
			auths += n.Refusals().Auth
		}
		return auths > 0
	})
}
