package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestCLISecureCluster is the "Secure a cluster" path of the README: an
// auth file made with `raidq security passwd` and `nkey`, certificates
// from `raidq security certs`, three `raidq node --auth --tls-*`
// processes, and the client commands with --user/--password, --nkey and
// --tls-ca. Clients without credentials or without the CA are refused
// with a message that says what is missing.
func TestCLISecureCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three node processes")
	}
	bin := testBinary(t)
	dir := t.TempDir()
	run := func(stdin string, args ...string) (string, string, error) {
		cmd := exec.Command(bin, args...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errb, strings.NewReader(stdin)
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	must := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := run(stdin, args...)
		if err != nil {
			t.Fatalf("raidq %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	tlsDir := filepath.Join(dir, "tls")
	must("", "security", "certs", "--dir", tlsDir, "--name", "node", "--hosts", "127.0.0.1,localhost")
	ca := filepath.Join(tlsDir, "ca.pem")
	hash := strings.TrimSpace(must("opspw\n", "security", "passwd", "--cost", "4"))
	seed := filepath.Join(dir, "shop.nk")
	pub := strings.TrimSpace(must("", "security", "nkey", "--out", seed))
	auth := filepath.Join(dir, "auth.conf")
	conf := fmt.Sprintf(`users: [
  {user: ops, password: %q, roles: [admin]}
  {nkey: %s, producer: [orders]}
  {user: reader, password: readerpw, consumer: [orders]}
  {user: sys, password: syspw, roles: [system]}
]
`, hash, pub)
	if err := os.WriteFile(auth, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := must("", "security", "nats-config", "--auth", auth); !strings.Contains(out, `"raidq.raidq.slot.*.orders.*"`) {
		t.Fatalf("nats-config: %s", out)
	}

	c, err := cluster.New(cluster.Config{Binary: bin, Dir: filepath.Join(dir, "nodes"), Nodes: 3, LogLevel: "info",
		Args: []string{"--auth", auth, "--tls-cert", filepath.Join(tlsDir, "node.pem"), "--tls-key", filepath.Join(tlsDir, "node-key.pem"),
			"--tls-ca", ca, "--meta-replicas", "3", "--http-listen", "127.0.0.1:-1", "--log-format", "json"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for i := range 3 {
		if err := c.StartNode(i); err != nil {
			t.Fatal(err)
		}
	}
	url := c.URL()
	admin := []string{"--nats", url, "--tls-ca", ca, "--user", "ops", "--password", "opspw", "--timeout", "10s"}
	// The topic's ensembles are drawn from the member records: wait until
	// every node's record is there, read through every server.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	t.Cleanup(func() {
		if t.Failed() {
			c.LogTails(t, 20)
		}
	})
	waitMembers(ctx, t, c, nats.RootCAs(ca), nats.UserInfo("ops", "opspw"), nats.CustomInboxPrefix(bus.InboxPrefix("ops")))
	if out, errOut, err := run("", append([]string{"topic", "create", "orders", "--partitions", "1", "--data-shards", "2",
		"--parity-shards", "1", "--acks", "2"}, admin...)...); err != nil {
		t.Fatalf("topic create as admin: %v\n%s%s", err, out, errOut)
	}
	must("a\nb\nc\n", "produce", "orders", "--nats", url, "--tls-ca", ca, "--nkey", seed, "--timeout", "20s")
	out := must("", "consume", "orders", "--from", "earliest", "--count", "3", "--nats", url, "--tls-ca", ca,
		"--user", "reader", "--password", "readerpw", "--timeout", "30s")
	if out != "a\nb\nc\n" && len(strings.Fields(out)) != 3 {
		t.Fatalf("consume: %q", out)
	}
	if out := must("", append([]string{"status"}, admin...)...); !strings.Contains(out, "n2") {
		t.Fatalf("status as admin: %s", out)
	}
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"topic", "list", "--nats", url, "--tls-ca", ca}, "requires credentials", exitRefused},
		{[]string{"topic", "list", "--nats", url, "--user", "ops", "--password", "opspw"}, "requires TLS", exitRefused},
		{[]string{"topic", "list", "--nats", url, "--tls-ca", ca, "--user", "ops", "--password", "nope"}, "Authorization Violation", exitRefused},
		{[]string{"status", "--nats", url, "--tls-ca", ca, "--user", "reader", "--password", "readerpw"}, "permission denied: user reader may not", exitRefused},
		{[]string{"topic", "list", "--nats", url, "--tls-ca", ca, "--user", "ops", "--nkey", seed}, "give one of", exitUsage},
	} {
		_, errOut, err := run("", append(c.args, "--timeout", "3s")...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("raidq %s: %v %q, want exit %d and an error with %q", strings.Join(c.args, " "), err, errOut, c.code, c.want)
		}
	}
	if !strings.Contains(c.Node(0).Proc.Stderr(), "authentication on") {
		t.Errorf("node log does not say authentication is on:\n%s", c.Node(0).Proc.Tail(20))
	}
	checkJSONLogs(t, c.Node(0).Proc.Stderr(), true)
	checkNodeMonitoring(t, c.Node(0).Proc.Stderr())
	checkSystemAccount(t, url, 3, nats.RootCAs(ca))
	checkPeerRemove(t, c, url, nats.RootCAs(ca))
}

// checkNodeMonitoring finds the monitoring URL a node logged and reads
// its /varz and /routez.
func checkNodeMonitoring(t *testing.T, stderr string) {
	t.Helper()
	m := regexp.MustCompile(`"NATS monitoring endpoints \(no authentication\)".*"url":"(http://[^"]+)"`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("the node does not log its monitoring URL:\n%s", grepLines(stderr, "monitoring"))
	}
	var routez struct {
		NumRoutes int `json:"num_routes"`
	}
	if err := json.Unmarshal([]byte(httpGet(t, m[1]+"/routez")), &routez); err != nil || routez.NumRoutes == 0 {
		t.Errorf("/routez: %+v %v", routez, err)
	}
	if body := httpGet(t, m[1]+"/varz"); !strings.Contains(body, `"server_name"`) {
		t.Errorf("/varz: %.300s", body)
	}
}

// checkPeerRemove is docs/cluster.md's step after a node replacement:
// the system user removes a stopped server from the JetStream meta group
// ($JS.API.SERVER.REMOVE, what `nats server raft peer-remove` sends).
func checkPeerRemove(t *testing.T, c *cluster.Cluster, url string, opts ...nats.Option) {
	t.Helper()
	gone := c.Node(2).ID
	if _, err := c.StopNode(2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sys, err := nats.Connect(url, append(opts, nats.UserInfo("sys", "syspw"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	var last string
	testkit.WaitFor(t, "the meta leader to remove "+gone, func() bool {
		m, err := sys.Request("$JS.API.SERVER.REMOVE", []byte(`{"peer":"`+gone+`"}`), 5*time.Second)
		if err != nil {
			last = err.Error()
			return false
		}
		last = string(m.Data)
		return strings.Contains(last, `"success":true`)
	})
	if t.Failed() {
		t.Logf("last answer: %s", last)
	}
}
