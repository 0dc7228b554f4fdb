package natsserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/scenarios/testkit"
)

const systemAuth = `users: [
  {user: sys, password: syspw, roles: [system]}
  {user: ops, password: opspw, roles: [admin]}
]
routes: {user: route, password: routepw}
`

// startSecureCluster starts size clustered JetStream servers with the
// users of auth and monitoring on random ports.
func startSecureCluster(t *testing.T, size int, auth string) []*Server {
	t.Helper()
	a, err := ParseAuthConfig([]byte(auth))
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, size)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	servers := make([]*Server, size)
	for i := range size {
		sec, err := NewSecurity("sys", a, nil)
		if err != nil {
			t.Fatal(err)
		}
		servers[i] = startServer(t, ServerOptions{Name: fmt.Sprintf("s%d", i), Host: "127.0.0.1", Port: -1,
			HTTPHost: "127.0.0.1", HTTPPort: -1, ClusterName: "sys", ClusterHost: "127.0.0.1", ClusterPort: ports[i],
			Routes: routes, JetStream: true, StoreDir: t.TempDir(), Security: sec})
	}
	testkit.WaitFor(t, "the JetStream meta group to elect a leader", func() bool { return hasMetaLeader(servers) })
	return servers
}

// pingServers sends $SYS.REQ.SERVER.PING[.suffix] on nc and collects the
// server names that answer within wait.
func pingServers(t *testing.T, nc *nats.Conn, suffix string, wait time.Duration) map[string]bool {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SYS.REQ.SERVER.PING"+suffix, inbox, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		var r struct {
			Server struct {
				Name string `json:"name"`
			} `json:"server"`
		}
		if json.Unmarshal(m.Data, &r) == nil && r.Server.Name != "" {
			got[r.Server.Name] = true
		}
	}
	return got
}

// TestSystemAccount: a system user of the auth file reaches every
// server's system services (what `nats server ls` and `nats server
// report jetstream` ask); a raidq user does not.
func TestSystemAccount(t *testing.T) {
	servers := startSecureCluster(t, 3, systemAuth)
	url := servers[0].ClientURL()
	sys, err := nats.Connect(url, nats.UserInfo("sys", "syspw"))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	for _, suffix := range []string{"", ".JSZ"} {
		var got map[string]bool
		testkit.WaitFor(t, "all three servers to answer "+suffix, func() bool {
			got = pingServers(t, sys, suffix, 2*time.Second)
			return len(got) == 3
		})
	}
	var errs = make(chan error, 1)
	ops, err := nats.Connect(url, nats.UserInfo("ops", "opspw"), nats.CustomInboxPrefix(bus.InboxPrefix("ops")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	if got := pingServers(t, ops, "", 500*time.Millisecond); len(got) != 0 {
		t.Fatalf("an admin user got answers from the system account: %v", got)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("admin's system request: %v, want a permission violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("admin's system request was not refused")
	}
}

// TestSystemAccountNeedsCredentials: declaring the system account does
// not let clients without credentials into the global account (the
// implicit no_auth_user nats-server adds for $G-and-$SYS-only setups).
func TestSystemAccountNeedsCredentials(t *testing.T) {
	a, err := ParseAuthConfig([]byte(systemAuth))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := NewSecurity("sys", a, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ServerOptions{Name: "x", Host: "127.0.0.1", Port: -1, Security: sec})
	if nc, err := nats.Connect(s.ClientURL()); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("connect without credentials: %v, want an authorization violation", err)
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("ops", "opspw"))
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	nc.Close()
}

// TestSystemRoleAlone: the system role takes no other role or topics.
func TestSystemRoleAlone(t *testing.T) {
	for _, conf := range []string{
		`users: [{user: s, password: p, roles: [system, admin]}]`,
		`users: [{user: s, password: p, roles: [system], consumer: [orders]}]`,
	} {
		if _, err := ParseAuthConfig([]byte(conf)); err == nil || !strings.Contains(err.Error(), "role system goes alone") {
			t.Errorf("%s: %v", conf, err)
		}
	}
	a, err := ParseAuthConfig([]byte(systemAuth))
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Summary(); !strings.Contains(s, "system 1") {
		t.Errorf("summary %q", s)
	}
}

// TestMonitoring: HTTPPort serves nats-server's monitoring endpoints.
func TestMonitoring(t *testing.T) {
	s := startServer(t, ServerOptions{Name: "mon", Host: "127.0.0.1", Port: -1, HTTPHost: "127.0.0.1", HTTPPort: -1,
		JetStream: true, StoreDir: t.TempDir()})
	base := s.MonitorURL()
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("MonitorURL %q", base)
	}
	for _, path := range []string{"/varz", "/jsz", "/connz", "/routez", "/healthz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Errorf("GET %s: %s, %v", path, resp.Status, err)
		}
		if path == "/varz" && body["server_name"] != "mon" {
			t.Errorf("/varz server_name %v", body["server_name"])
		}
	}
	if u := startServer(t, ServerOptions{Port: -1}).MonitorURL(); u != "" {
		t.Errorf("no HTTPPort: MonitorURL %q", u)
	}
}
