package raidq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/localtest"
	"github.com/raidq/raidq/scenarios/testkit"
)

// violations records the permission errors the server sent one connection.
type violations struct {
	mu   sync.Mutex
	list []string
}

func (v *violations) handler() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.list = append(v.list, err.Error())
	})
}

func (v *violations) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.list
	v.list = nil
	return out
}

// wait waits until a recorded error mentions substr (the server's
// asynchronous -ERR reaching the connection's error handler).
func (v *violations) wait(t *testing.T, substr string) {
	t.Helper()
	defer func() { // WaitFor failed the test: show what was recorded instead
		if t.Failed() {
			t.Logf("permission violations recorded: %q", v.take())
		}
	}()
	testkit.WaitFor(t, fmt.Sprintf("a permission violation mentioning %q", substr), func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, e := range v.list {
			if strings.Contains(e, substr) {
				return true
			}
		}
		return false
	})
}

type secEnv struct {
	lc      *server.LocalCluster
	url     string
	tls     natsserver.TLSBundle
	cluster string
	nkey    string // seed file of the nkey consumer
}

const secCluster = "sec"

func startSecureCluster(t *testing.T) *secEnv {
	t.Helper()
	dir := t.TempDir()
	b, _, err := natsserver.EnsureDevTLS(filepath.Join(dir, "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "payments.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := natsserver.ParseAuthConfig([]byte(fmt.Sprintf(`
users: [
  {user: ops, password: opspw, roles: [admin]}
  {user: shop, password: shoppw, producer: [orders]}
  {user: reader, password: readerpw, consumer: [orders], groups: [billing]}
  {nkey: %s, consumer: [payments], producer: [payments]}
]`, pub)))
	if err != nil {
		t.Fatal(err)
	}
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: dir, Cluster: secCluster, Listen: "127.0.0.1:-1",
		NoSync: true, Auth: auth, TLS: b.Files(), Logger: testkit.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	return &secEnv{lc: lc, url: lc.ClientURL(), tls: b, cluster: secCluster, nkey: seedFile}
}

func (e *secEnv) connect(t *testing.T, a raidq.ClientAuth, v *violations) *raidq.Client {
	t.Helper()
	if a.TLSCA == "" {
		a.TLSCA = e.tls.CA
	}
	c, err := raidq.Connect(e.url, raidq.WithCluster(e.cluster), raidq.WithAuth(a), raidq.WithNATSOptions(v.handler()),
		raidq.WithTimeout(5*time.Second), raidq.WithLogger(testkit.Logger(t, slog.LevelWarn)))
	if err != nil {
		t.Fatalf("connect as %+v: %v", a, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSecurityRoles: every role does what it needs without a single
// permission violation, and is refused the rest.
func TestSecurityRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	e := startSecureCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// admin: creates topics, reads status.
	var av violations
	admin := e.connect(t, raidq.ClientAuth{User: "ops", Password: "opspw"}, &av)
	for _, name := range []string{"orders", "payments"} {
		if _, err := admin.CreateTopic(ctx, raidq.TopicConfig{Name: name, Partitions: 2, Params: raidq.DefaultParams()}); err != nil {
			t.Fatalf("admin creates %s: %v", name, err)
		}
	}
	st, err := actors.Status(ctx, admin.Conn(), e.cluster)
	if err != nil || len(st) != 6 {
		t.Fatalf("admin status: %d nodes, %v", len(st), err)
	}
	if got := av.take(); len(got) > 0 {
		t.Fatalf("admin: permission violations doing its job: %q", got)
	}

	// producer of orders: writes orders.
	var pv violations
	prod := e.connect(t, raidq.ClientAuth{User: "shop", Password: "shoppw"}, &pv)
	if err := prod.WaitTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	p, err := prod.Producer("orders")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now().Add(-time.Second)
	for i := range 5 {
		if _, err := p.Send(ctx, raidq.Message{Value: fmt.Appendf(nil, "order %d", i)}); err != nil {
			t.Fatalf("producer writes orders: %v", err)
		}
	}
	if got := pv.take(); len(got) > 0 {
		t.Fatalf("producer: permission violations doing its job: %q", got)
	}

	// consumer of orders: reads orders by scanning, in a group, and on
	// the deliver subjects.
	var cv violations
	cons := e.connect(t, raidq.ClientAuth{User: "reader", Password: "readerpw"}, &cv)
	sub, err := cons.Conn().SubscribeSync(natsserver.MustSubjects(e.cluster).DeliverAll("orders"))
	if err != nil {
		t.Fatal(err)
	}
	localtest.ReadN(t, cons, "orders", 5, raidq.WithStart(start))
	localtest.ReadN(t, cons, "orders", 5, raidq.WithGroup("billing"), raidq.WithAutoCommit(50*time.Millisecond))
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Errorf("consumer on the deliver subject: %v", err)
	}
	if got := cv.take(); len(got) > 0 {
		t.Fatalf("consumer: permission violations doing its job: %q", got)
	}

	// The nkey user produces and consumes payments.
	var nv violations
	nk := e.connect(t, raidq.ClientAuth{NKeySeed: e.nkey}, &nv)
	if err := nk.WaitTopic(ctx, "payments"); err != nil {
		t.Fatal(err)
	}
	np, err := nk.Producer("payments")
	if err != nil {
		t.Fatal(err)
	}
	defer np.Close()
	if _, err := np.Send(ctx, raidq.Message{Value: []byte("paid")}); err != nil {
		t.Fatalf("nkey user writes payments: %v", err)
	}
	localtest.ReadN(t, nk, "payments", 1, raidq.WithStart(start))
	if got := nv.take(); len(got) > 0 {
		t.Fatalf("nkey user: permission violations doing its job: %q", got)
	}

	// Refusals.
	pp, err := prod.Producer("payments")
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := pp.Send(sctx, raidq.Message{Value: []byte("forged")}); err == nil {
		t.Error("producer of orders wrote payments")
	}
	scancel()
	_ = pp.Close()
	pv.wait(t, "Publish to \"raidq.sec.slot.")

	s := natsserver.MustSubjects(e.cluster)
	scan := bus.ScanReq{Topic: "orders", Partition: 0, From: 1, To: 2}
	if _, err := prod.Conn().Request(s.Scan("n0", "orders", 0), scan.Marshal(), 500*time.Millisecond); err == nil {
		t.Error("producer scanned orders")
	}
	pv.wait(t, "Publish to \"raidq.sec.scan.n0.orders.0\"")

	if _, err := cons.Conn().Request(s.Slot("n0", "orders", 0), []byte("x"), 500*time.Millisecond); err == nil {
		t.Error("consumer wrote a slot")
	}
	cv.wait(t, "Publish to \"raidq.sec.slot.n0.orders.0\"")
	if _, err := cons.Conn().Request(s.Scan("n0", "payments", 0), scan.Marshal(), 500*time.Millisecond); err == nil {
		t.Error("consumer of orders scanned payments")
	}
	cv.wait(t, "Publish to \"raidq.sec.scan.n0.payments.0\"")
	if _, err := cons.Conn().SubscribeSync(s.DeliverAll("payments")); err != nil {
		t.Fatal(err)
	}
	cv.wait(t, "Subscription to \"raidq.sec.deliver.payments.*\"")
	if _, err := cons.Conn().SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	cv.wait(t, "Subscription to \"_INBOX.>\"")
	if _, err := cons.Conn().SubscribeSync("_INBOX_shop.>"); err != nil {
		t.Fatal(err)
	}
	cv.wait(t, "Subscription to \"_INBOX_shop.>\"")
	// Group keys of another group, topic keys of the metadata.
	if err := metaOf(t, cons).GroupHeartbeat(ctx, "other", "orders", "m1", time.Now(), 0); err == nil {
		t.Error("consumer wrote another group's keys")
	}
	cv.wait(t, "Publish to \"$KV.raidq_sec_groups.g.other.orders.m.m1\"")
	if _, err := prod.CreateTopic(ctx, raidq.TopicConfig{Name: "rogue", Partitions: 1, Params: raidq.DefaultParams()}); err == nil {
		t.Error("producer created a topic")
	}
	pv.wait(t, "Publish to \"$KV.raidq_sec_meta.topic.rogue\"")
	if err := metaOf(t, prod).PutMember(ctx, metaMember("n9")); err == nil {
		t.Error("producer wrote a member record")
	}
	pv.wait(t, "$KV.raidq_sec_meta.member.n9")

	// Connecting without credentials, with a wrong password, or without TLS.
	for name, a := range map[string]raidq.ClientAuth{
		"no credentials": {TLSCA: e.tls.CA},
		"wrong password": {User: "shop", Password: "nope", TLSCA: e.tls.CA},
	} {
		_, err := raidq.Connect(e.url, raidq.WithCluster(e.cluster), raidq.WithAuth(a), raidq.WithTimeout(2*time.Second))
		if err == nil || !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("%s: %v, want an authorization error", name, err)
		}
	}
	if _, err := raidq.Connect(e.url, raidq.WithCluster(e.cluster), raidq.WithUserPassword("shop", "shoppw"),
		raidq.WithTimeout(2*time.Second)); err == nil {
		t.Error("connected without the CA (TLS not verified)")
	}

	// Still serving.
	if _, err := p.Send(ctx, raidq.Message{Value: []byte("after")}); err != nil {
		t.Fatalf("producer after the refusals: %v", err)
	}
	// The nodes' own connections (node role) never lacked a permission.
	if v := e.lc.NATSServer().Security().InternalViolations(); v != 0 {
		t.Errorf("%d permission violations on the nodes' connections", v)
	}
}

// metaOf is the metadata over c's connection, with c's permissions: the
// tests try writes the client API never offers.
func metaOf(t *testing.T, c *raidq.Client) *meta.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := meta.Open(ctx, c.Conn(), secCluster, meta.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func metaMember(id string) meta.Member {
	return meta.Member{ID: id, ClientURL: "nats://127.0.0.1:1", Started: 1, Heartbeat: time.Now().UnixNano()}
}

// TestConnectMissingNKeyFile: a seed file that cannot be read fails
// Connect with that reason alone, not a hint about the server (the TLS
// one was wrong: options stop at the failing one, so TLS looked unset).
func TestConnectMissingNKeyFile(t *testing.T) {
	_, err := raidq.Connect("nats://127.0.0.1:1", raidq.WithNKeySeed(filepath.Join(t.TempDir(), "missing.nk")))
	if err == nil || !strings.Contains(err.Error(), "nkey seed") || strings.Contains(err.Error(), "running there") ||
		strings.Contains(err.Error(), "TLS") {
		t.Fatalf("connect with a missing seed file: %v", err)
	}
}
