package natsserver

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/raidq/raidq/bus"
)

const sampleAuth = `
# the five roles
users: [
  {user: node, password: "$2a$11$W2zko751KUvVy59mUTWmpOdWZpqAlmwBzdX2XpUJP7jhlW1bH0i9y", roles: [node]}
  {user: ops, password: opspw, roles: [admin]}
  {user: shop, password: shoppw, producer: [orders, payments]}
  {nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4, consumer: [orders], groups: [billing]}
  {user: gw1, password: gwpw, roles: [gateway]}
]
routes: {user: route, password: routepw}
`

func TestParseAuthConfig(t *testing.T) {
	a, err := ParseAuthConfig([]byte(sampleAuth))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Users) != 5 || a.Routes == nil || a.Routes.User != "route" {
		t.Fatalf("parsed %+v", a)
	}
	if !a.Users[0].Has(RoleNode) || !a.Users[1].Has(RoleAdmin) || !a.Users[2].Has(RoleProducer) || !a.Users[3].Has(RoleConsumer) ||
		!a.Users[4].Has(RoleGateway) {
		t.Fatalf("roles: %+v", a.Users)
	}
	if a.Users[0].Password[:4] != "$2a$" {
		t.Errorf("bcrypt hash read as %q", a.Users[0].Password)
	}
	// The same as JSON.
	j := `{"users": [{"user": "shop", "password": "p", "producer": ["orders"]}]}`
	if a, err := ParseAuthConfig([]byte(j)); err != nil || a.Users[0].Producer[0] != "orders" {
		t.Fatalf("JSON: %+v %v", a, err)
	}
	if !strings.Contains(a.Summary(), "5 users (node 1, admin 1, gateway 1, producer 1, consumer 1), route user route") {
		t.Errorf("summary %q", a.Summary())
	}
}

func TestParseAuthConfigErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{``, "no users"},
		{`users: []`, "empty"},
		{`users: {a: 1}`, "want a list"},
		{`users: [{user: a, password: b, roles: [root]}]`, `unknown role "root"`},
		{`users: [{user: a, password: b, roles: [gateway, gw]}]`, `unknown role "gw" (roles: node, admin, gateway, system;`},
		{`users: [{user: a, password: b, roles: [gateway], groups: [g]}]`, "groups without consumer"},
		{`users: [{user: a, password: b, roles: [producer]}]`, "producer: [topic"},
		{`users: [{user: a, password: b}]`, "no role"},
		{`users: [{user: a, roles: [admin]}]`, "password is required"},
		{`users: [{user: "a.b", password: c, roles: [admin]}]`, "user name"},
		{`users: [{nkey: UBAD, roles: [admin]}]`, "not a public user NKey"},
		{`users: [{nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4, user: a, password: b, roles: [admin]}]`, "not both"},
		{`users: [{user: a, password: b, producer: ["or.ders"]}]`, "producer topic"},
		{`users: [{user: a, password: b, producer: [x]}, {user: a, password: c, consumer: [y]}]`, "also user 1"},
		{`users: [{user: a, password: b, admin: true}]`, `unknown key "admin"`},
		{`users: [{user: a, password: b, groups: [g]}]`, "no role"},
		{`users: [{user: a, password: b, producer: [x], groups: [g]}]`, "groups without consumer"},
		{`users: [{user: a, password: b, roles: [admin]}], routes: {user: r}`, "routes: a password is required"},
		{`users: [{user: a, password: b, roles: [admin]}], extra: 1`, `unknown key "extra"`},
		{`include "other.conf"`, "include is not supported"},
		{`users: [`, "bad auth config"},
	} {
		_, err := ParseAuthConfig([]byte(c.text))
		if err == nil || !errors.Is(err, ErrBadAuthConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.text, err, c.want)
		}
	}
}

func TestLoadAuthFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "auth.conf")
	if err := os.WriteFile(f, []byte(sampleAuth), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAuthFile(f); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.conf")
	if err := os.WriteFile(big, make([]byte, MaxAuthFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAuthFile(big); !errors.Is(err, ErrBadAuthConfig) {
		t.Errorf("oversized file: %v", err)
	}
	if _, err := LoadAuthFile(filepath.Join(dir, "none")); err == nil {
		t.Error("missing file accepted")
	}
}

// TestRolePermissions pins the subjects of each role.
func TestRolePermissions(t *testing.T) {
	a, err := ParseAuthConfig([]byte(sampleAuth))
	if err != nil {
		t.Fatal(err)
	}
	perms := func(i int) (pub, sub []string) {
		p, err := a.Users[i].Permissions("prod")
		if err != nil {
			t.Fatal(err)
		}
		return p.Publish.Allow, p.Subscribe.Allow
	}
	has := func(list []string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !slices.Contains(list, w) {
				t.Errorf("missing %q in %q", w, list)
			}
		}
	}
	hasNot := func(list []string, bad ...string) {
		t.Helper()
		for _, b := range bad {
			for _, s := range list {
				if strings.HasPrefix(s, b) {
					t.Errorf("%q grants %q", s, b)
				}
			}
		}
	}
	pub, sub := perms(0) // node
	has(pub, "raidq.prod.>", "$KV.raidq_prod_meta.>", "$KV.raidq_prod_groups.>", "$JS.API.STREAM.*.KV_raidq_prod_meta")
	has(sub, "raidq.prod.>", "$SRV.>", "_INBOX.>", "_INBOX_node.>")
	if p, _ := a.Users[0].Permissions("prod"); p.Response == nil || p.Response.MaxMsgs != 1 {
		t.Error("nodes must answer requests (allow_responses)")
	}
	pub, sub = perms(1) // admin
	has(pub, "$KV.raidq_prod_meta.topic.>", "$KV.raidq_prod_groups.g.>", "$SRV.PING.>", "raidq.prod.status.*", "raidq.prod.fault.clock.*",
		"$JS.API.STREAM.INFO.KV_raidq_prod_meta")
	hasNot(pub, "raidq.prod.slot", "raidq.prod.scan", "$KV.raidq_prod_meta.member", "$KV.raidq_prod_groups.lease", "$KV.raidq_prod_groups.kgroup")
	has(sub, "_INBOX_ops.>")
	pub, sub = perms(2) // producer
	has(pub, "raidq.prod.slot.*.orders.*", "raidq.prod.slot.*.payments.*")
	hasNot(pub, "raidq.prod.scan", "raidq.prod.indoubt", "$KV.", "$SRV", "raidq.prod.hb", "raidq.prod.fault", "$JS.API.STREAM.CREATE",
		"$JS.API.STREAM.DELETE")
	hasNot(sub, "raidq.", "_INBOX.")
	pub, sub = perms(3) // consumer
	nk := a.Users[3].NKey
	has(pub, "raidq.prod.scan.*.orders.*", "raidq.prod.indoubt.orders.*", "$KV.raidq_prod_groups.g.billing.orders.>")
	hasNot(pub, "raidq.prod.slot", "raidq.prod.fault", "$KV.raidq_prod_meta", "$KV.raidq_prod_groups.lease", "$KV.raidq_prod_groups.g.*")
	has(sub, "raidq.prod.deliver.orders.>", "_INBOX_"+nk+".>")
	pub, sub = perms(4) // gateway
	has(pub, "raidq.prod.slot.*.*.*", "raidq.prod.scan.*.*.*", "raidq.prod.indoubt.*.*",
		"$KV.raidq_prod_meta.topic.>", "$KV.raidq_prod_meta.gateway.*", "$KV.raidq_prod_groups.kgroup.>",
		"$JS.API.STREAM.INFO.KV_raidq_prod_meta", "$JS.API.STREAM.MSG.GET.KV_raidq_prod_groups")
	hasNot(pub, "$KV.raidq_prod_meta.member", "$KV.raidq_prod_meta.>", "$KV.raidq_prod_groups.g.", "$KV.raidq_prod_groups.lease",
		"raidq.prod.hb", "raidq.prod.status", "raidq.prod.fault", "raidq.prod.deliver", "raidq.prod.>", "$SRV", "_INBOX",
		"$JS.API.STREAM.CREATE", "$JS.API.STREAM.UPDATE", "$JS.API.STREAM.DELETE", "$JS.API.STREAM.PURGE")
	has(sub, "raidq.prod.deliver.*.>", "_INBOX_gw1.>")
	hasNot(sub, "raidq.prod.slot", "raidq.prod.scan", "raidq.prod.hb", "raidq.prod.>", "_INBOX.", "$")
	if p, _ := a.Users[4].Permissions("prod"); p.Response != nil {
		t.Error("a gateway answers no requests: no allow_responses")
	}
	users, nkeys, err := a.ServerUsers("prod")
	if err != nil || len(users) != 4 || len(nkeys) != 1 {
		t.Fatalf("server users: %d, nkeys %d, %v", len(users), len(nkeys), err)
	}
}

func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	b, created, err := EnsureDevTLS(dir, []string{"node1.example", "10.1.2.3"})
	if err != nil || !created {
		t.Fatalf("first: %v %v", created, err)
	}
	again, created, err := EnsureDevTLS(dir, nil)
	if err != nil || created || again != b {
		t.Fatalf("second run regenerated the files (%v %v)", created, err)
	}
	f := b.Files()
	if err := f.Check(true); err != nil {
		t.Fatal(err)
	}
	sc, err := f.ServerConfig()
	if err != nil || sc.ClientAuth != tls.VerifyClientCertIfGiven {
		t.Fatalf("server config %v %v", sc.ClientAuth, err)
	}
	rc, err := f.RouteConfig()
	if err != nil || rc.ClientAuth != tls.RequireAndVerifyClientCert || rc.RootCAs == nil {
		t.Fatalf("route config: %v", err)
	}
	leaf := sc.Certificates[0].Leaf
	if leaf == nil || !slices.Contains(leaf.DNSNames, "node1.example") || len(leaf.IPAddresses) < 2 {
		t.Fatalf("server certificate names: %+v", leaf)
	}
	if _, err := bus.ClientTLSConfig(b.CA, b.ClientCert, b.ClientKey); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*TLSFiles{{Cert: b.Cert}, {Cert: b.Cert, Key: b.Key, VerifyClients: true}} {
		if err := bad.Check(false); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (&TLSFiles{Cert: b.Cert, Key: b.Key}).Check(true); err == nil || !strings.Contains(err.Error(), "--tls-ca") {
		t.Errorf("clustered without a CA: %v", err)
	}
	if _, err := bus.ClientTLSConfig(filepath.Join(dir, "none.pem"), "", ""); err == nil {
		t.Error("missing CA accepted")
	}
}

func TestScanSubjects(t *testing.T) {
	s := MustSubjects("prod")
	if got := s.Scan("n1", "orders", 7); got != "raidq.prod.scan.n1.orders.7" {
		t.Errorf("Scan = %q", got)
	}
	if got := s.ScanAll("n1"); got != "raidq.prod.scan.n1.>" {
		t.Errorf("ScanAll = %q", got)
	}
	scan, node, topic, p, err := s.ParseRequest(s.Scan("n1", "orders", 7))
	if err != nil || !scan || node != "n1" || topic != "orders" || p != 7 {
		t.Errorf("ParseRequest(scan) = %v %q %q %d %v", scan, node, topic, p, err)
	}
	scan, _, _, _, err = s.ParseRequest(s.Slot("n1", "orders", 7))
	if err != nil || scan {
		t.Errorf("ParseRequest(slot) = %v %v", scan, err)
	}
	for _, bad := range []string{"raidq.prod.scan.n1.orders", "raidq.prod.scan.n1.orders.07", "raidq.other.scan.n1.t.1", "raidq.prod.scan..t.1"} {
		if _, _, _, _, err := s.ParseRequest(bad); !errors.Is(err, bus.ErrBadSubject) {
			t.Errorf("ParseRequest(%q) = %v", bad, err)
		}
	}
}
