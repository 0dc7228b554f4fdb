package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/actors/server"
	"github.com/spf13/cobra"

	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// runStatus runs `raidq status args...` and returns its stdout.
func runStatus(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCommand(statusCmd(), args...)
}

// runCommand runs cmd with args in this process, quietly, and returns its
// stdout and error.
func runCommand(cmd *cobra.Command, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

// freePort returns a TCP port nothing listens on (it was free a moment ago).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

func TestStatusNoNATS(t *testing.T) {
	url := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	_, err := runStatus(t, "--nats", url, "--timeout", "500ms")
	if err == nil || !strings.Contains(err.Error(), "cannot reach NATS at "+url) {
		t.Fatalf("status with nothing listening: %v, want a clear NATS error naming %s", err, url)
	}
}

func TestStatusNoNodes(t *testing.T) {
	srv, err := natsserver.StartServer(natsserver.ServerOptions{Host: "127.0.0.1", Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	_, err = runStatus(t, "--nats", url, "--cluster", "empty", "--timeout", "300ms")
	want := "no raidq node answered on " + url + " (cluster empty): is a node running?"
	if err == nil || err.Error() != want {
		t.Fatalf("status with NATS but no node: %v, want %q", err, want)
	}
}

func TestStatusCluster(t *testing.T) {
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), Logger: testkit.Logger(t, slog.LevelWarn),
		Cluster: "cli", Listen: "127.0.0.1:-1", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	t.Setenv("RAIDQ_NATS", lc.ClientURL()) // the flag's default comes from the environment
	waitStatusEndpoints(t, lc.ClientURL(), "cli", lc.NodeIDs())

	// Discovery listens for the whole timeout: generous, so that a loaded
	// CI machine (other packages' tests run alongside) finds all six.
	out, err := runStatus(t, "--cluster", "cli", "--timeout", "3s", "--json")
	if err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if rep.Cluster != "cli" || rep.NATS != lc.ClientURL() || len(rep.Nodes) != 6 {
		t.Fatalf("--json: cluster %q nats %q, %d nodes:\n%s", rep.Cluster, rep.NATS, len(rep.Nodes), out)
	}
	for _, n := range rep.Nodes {
		if n.Health == bus.HealthNoAnswer || n.Health == bus.HealthFailed || !n.NoSync {
			t.Errorf("node %+v", n)
		}
	}

	if err := lc.CreateTopic("orders", 2, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	if err := lc.KillNode(2); err != nil {
		t.Fatal(err)
	}
	// A killed node is expected (member record, ensembles): it gets a
	// "no answer" row, and status exits 1 while every partition reaches W.
	out, err = runStatus(t, "--cluster", "cli", "--timeout", "3s")
	if !errors.Is(err, errFailed) || exitCode(err) != exitFailure {
		t.Fatalf("status with n2 killed: %v (exit %d), want exit 1\n%s", err, exitCode(err), out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "NODE") {
		t.Fatalf("want a header and 6 node rows:\n%s", out)
	}
	for _, l := range lines[1:] {
		if dead := strings.HasPrefix(l, "n2 "); dead != strings.Contains(l, bus.HealthNoAnswer) || !dead && !strings.Contains(l, "no-fsync") {
			t.Errorf("row %q", l)
		}
	}
	// Two more down: 3 of 6 serve, below W=4 for every partition: exit 3,
	// and --json says which partitions and nodes.
	for _, i := range []int{3, 4} {
		if err := lc.KillNode(i); err != nil {
			t.Fatal(err)
		}
	}
	out, err = runStatus(t, "--cluster", "cli", "--timeout", "3s", "--json")
	if code := exitCode(err); code != exitUnreachable {
		t.Fatalf("status with 3 of 6 killed: %v (exit %d), want exit 3\n%s", err, code, out)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if len(rep.Nodes) != 6 || len(rep.Missing) != 3 || len(rep.BelowW) != 2 || rep.Metadata != "ok" || len(rep.Expected) != 6 {
		t.Errorf("--json with 3 down: %d nodes, missing %v, below W %v, metadata %q, expected %v",
			len(rep.Nodes), rep.Missing, rep.BelowW, rep.Metadata, rep.Expected)
	}
	if _, err := runStatus(t, "--timeout", "0s"); err == nil || errors.Is(err, errFailed) {
		t.Errorf("--timeout 0s: %v, want a flag error", err)
	}
}

// waitStatusEndpoints waits until every node of ids answers on its status
// endpoint. A started node's micro service subscriptions (PING, INFO,
// STATS, status) are not flushed when node.Start returns, so a discovery
// right after the start can miss a node. The status endpoint is the last
// of them, on the same connection, so once it answers PING reaches the
// node too.
func waitStatusEndpoints(t *testing.T, url, cluster string, ids []string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj, err := bus.NewSubjects(cluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		testkit.WaitFor(t, "node "+id+"'s status endpoint to answer", func() bool {
			_, err := nc.Request(subj.Status(id), nil, 5*time.Second)
			return err == nil
		})
	}
}

// TestStatusVersions: the VERSION column, and a WARNING line (--json:
// versions and version_warning) when the nodes run different versions.
func TestStatusVersions(t *testing.T) {
	nodes := []bus.NodeStatus{
		{Node: "n1", Health: bus.HealthOK, Version: "v0.3.0"},
		{Node: "n2", Health: bus.HealthOK, Version: "v0.3.0"},
		{Node: "n3", Health: bus.HealthOK, Version: "v0.2.1"},
		{Node: "n4", Health: bus.HealthNoAnswer},
	}
	var out bytes.Buffer
	f := &statusFlags{cluster: "c", url: "nats://x"}
	if err := f.print(&out, nodes, expectedSet{}, statusVerdict{}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	want := "WARNING: nodes run different raidq versions: v0.2.1 on n3; v0.3.0 on n1 n2 (finish or roll back the upgrade)"
	if !strings.Contains(text, want) || !strings.Contains(text, "VERSION") {
		t.Errorf("table:\n%s\nwant %q", text, want)
	}
	for _, l := range strings.Split(text, "\n") {
		if odd := strings.Contains(l, "version differs"); odd != strings.HasPrefix(l, "n3 ") {
			t.Errorf("row %q: only n3's should say its version differs", l)
		}
	}
	out.Reset()
	f.asJSON = true
	if err := f.print(&out, nodes, expectedSet{}, statusVerdict{}); err != nil {
		t.Fatal(err)
	}
	var rep statusReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.VersionWarning == "" || len(rep.Versions["v0.3.0"]) != 2 || len(rep.Versions) != 2 {
		t.Errorf("--json: versions %v, warning %q", rep.Versions, rep.VersionWarning)
	}
	out.Reset()
	f.asJSON = false
	if err := f.print(&out, nodes[:2], expectedSet{}, statusVerdict{}); err != nil || strings.Contains(out.String(), "WARNING") {
		t.Errorf("one version: %v\n%s", err, out.String())
	}
}

// TestStatusJudge: which nodes are not serving, and which partitions
// they leave below W.
func TestStatusJudge(t *testing.T) {
	nodes := []bus.NodeStatus{{Node: "a", Health: bus.HealthOK}, {Node: "b", Health: bus.HealthSlow},
		{Node: "c", Health: bus.HealthNoAnswer}, {Node: "d", Health: bus.HealthClockOff}, {Node: "e", Health: bus.HealthFailed}}
	topics := []meta.TopicRecord{{Name: "t", W: 2, Ensembles: [][]string{{"a", "b", "c"}, {"a", "c", "d"}, {"e", "d", "c"}}}}
	v := judge(nodes, topics)
	if got := strings.Join(v.Missing, " "); got != "c d e" {
		t.Errorf("missing %q, want c d e", got)
	}
	if len(v.BelowW) != 2 || v.BelowW[0].Partition != 1 || v.BelowW[1].Partition != 2 || v.BelowW[1].Serving != 0 {
		t.Fatalf("below W: %+v, want partitions 1 and 2", v.BelowW)
	}
	if got := v.BelowW[0].String(); got != "t/1: 1 of 2 needed nodes serving (down: c d)" {
		t.Errorf("%q", got)
	}
	e := expectedSet{members: []string{"b", "a"}, topics: topics}
	if got := strings.Join(e.ids(), " "); got != "a b c d e" {
		t.Errorf("expected ids %q", got)
	}
}

// TestStatusPeers: nodes the answering nodes' ensembles name, but that
// have no row (the metadata could not be read), get "no answer" rows.
func TestStatusPeers(t *testing.T) {
	nodes := []bus.NodeStatus{{Node: "n2", Cluster: "c", Health: bus.HealthOK, Peers: []string{"n1", "n2", "n3", "bad id"}},
		{Node: "n1", Cluster: "c", Health: bus.HealthOK, Peers: []string{"n4"}}}
	got := addPeers(nodes, time.Second)
	var rows []string
	for _, n := range got {
		rows = append(rows, n.Node+":"+n.Health)
	}
	if want := "n1:ok n2:ok n3:no answer n4:no answer"; strings.Join(rows, " ") != want {
		t.Errorf("rows %q, want %q", strings.Join(rows, " "), want)
	}
}
