package natsserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
)

// TestGatewayRoleOnServer: a gateway-role user on a server with the auth
// file does what a Kafka gateway does (binds both buckets, writes its
// gateway record, creates and deletes topic records, writes Kafka group
// records, reads native group keys, sends write, scan and in-doubt
// requests for any topic, receives deliveries) and the server refuses it
// the keys and subjects it must not touch.
func TestGatewayRoleOnServer(t *testing.T) {
	auth, err := ParseAuthConfig([]byte(`users: [{user: gw1, password: gwpw, roles: [gateway]}]`))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := NewSecurity("c", auth, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ServerOptions{Name: "n1", Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), Security: sec})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node := connect(t, s, "node")
	if _, err := meta.Open(ctx, node, "c", meta.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 64)
	gw, err := nats.Connect(s.ClientURL(), nats.UserInfo("gw1", "gwpw"), nats.CustomInboxPrefix(bus.InboxPrefix("gw1")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()

	gatewayKV(ctx, t, node, gw)
	gatewayData(t, node, gw)
	gatewayRefused(t, gw, refused)
	if sec.InternalViolations() != 0 {
		t.Errorf("%d violations on the node's own connection", sec.InternalViolations())
	}
}

// gatewayKV: the metadata the gateway reads and writes.
func gatewayKV(ctx context.Context, t *testing.T, node, gw *nats.Conn) {
	t.Helper()
	st, err := meta.Open(ctx, gw, "c", meta.Options{})
	if err != nil {
		t.Fatalf("gateway binds the buckets: %v", err)
	}
	if err := st.PutGateway(ctx, meta.Gateway{ID: "kafka1", BrokerID: 1, Advertise: "127.0.0.1:9092"}); err != nil {
		t.Fatalf("gateway record: %v", err)
	}
	if gws, err := st.Gateways(ctx); err != nil || len(gws) != 1 {
		t.Fatalf("gateway records: %v %v", gws, err)
	}
	js, err := jetstream.New(gw)
	if err != nil {
		t.Fatal(err)
	}
	mkv, err := js.KeyValue(ctx, metaBucketName("c"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mkv.Create(ctx, "topic.orders", []byte("{}")); err != nil {
		t.Fatalf("create a topic record: %v", err)
	}
	if err := mkv.Delete(ctx, "topic.orders"); err != nil {
		t.Fatalf("delete a topic record: %v", err)
	}
	njs, err := jetstream.New(node)
	if err != nil {
		t.Fatal(err)
	}
	nkv, err := njs.KeyValue(ctx, groupsBucketName("c"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nkv.Put(ctx, "g.native.orders.m.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	gkv, err := js.KeyValue(ctx, groupsBucketName("c"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gkv.Get(ctx, "g.native.orders.m.x"); err != nil {
		t.Fatalf("read a native group key: %v", err)
	}
	if _, err := gkv.Put(ctx, "kgroup.billing", []byte("{}")); err != nil {
		t.Fatalf("write a Kafka group record: %v", err)
	}
}

// gatewayData: requests for any topic reach the nodes, deliveries reach
// the gateway.
func gatewayData(t *testing.T, node, gw *nats.Conn) {
	t.Helper()
	subj := MustSubjects("c")
	got, err := node.SubscribeSync("raidq.c.>")
	if err != nil {
		t.Fatal(err)
	}
	defer got.Unsubscribe()
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	deliver, err := gw.SubscribeSync(subj.DeliverAll("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Flush(); err != nil {
		t.Fatal(err)
	}
	sent := []string{subj.Slot("n1", "orders", 0), subj.Scan("n2", "payments", 3), subj.InDoubt("orders", 1)}
	for _, sj := range sent {
		if err := gw.Publish(sj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := node.Publish(subj.Deliver("orders", 2), []byte("rec")); err != nil {
		t.Fatal(err)
	}
	// Two connections' messages arrive in either order.
	want := map[string]bool{subj.Deliver("orders", 2): true}
	for _, sj := range sent {
		want[sj] = true
	}
	for len(want) > 0 {
		m, err := got.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("node did not receive %v: %v", want, err)
		}
		delete(want, m.Subject)
	}
	if m, err := deliver.NextMsg(10 * time.Second); err != nil || string(m.Data) != "rec" {
		t.Fatalf("gateway delivery: %v %v", m, err)
	}
}

// gatewayRefused: what the gateway may not publish or subscribe to is
// refused by the server (each refusal comes back as an async error naming
// the subject).
func gatewayRefused(t *testing.T, gw *nats.Conn, refused <-chan error) {
	t.Helper()
	pubs := []string{"$KV.raidq_c_meta.member.n9", "$KV.raidq_c_groups.g.native.orders.m.y", "$KV.raidq_c_groups.lease.orders.0",
		"raidq.c.hb.n1", "raidq.c.status.n1", "$JS.API.STREAM.DELETE.KV_raidq_c_meta", "_INBOX_other.x"}
	subs := []string{"_INBOX.>", "raidq.c.slot.>", "raidq.c.indoubt.>"}
	for _, p := range pubs {
		if err := gw.Publish(p, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, sj := range subs {
		if _, err := gw.SubscribeSync(sj); err != nil {
			t.Fatal(err)
		}
	}
	_ = gw.Flush()
	want := map[string]bool{}
	for _, sj := range append(pubs, subs...) {
		want[`"`+sj+`"`] = true
	}
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case err := <-refused:
			for w := range want {
				if strings.Contains(err.Error(), w) {
					delete(want, w)
				}
			}
		case <-deadline:
			t.Fatalf("not refused: %v", want)
		}
	}
}
