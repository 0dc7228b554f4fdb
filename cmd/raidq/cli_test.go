package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors"
	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus"
	"github.com/raidq/raidq/bus/meta"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestCLIProduceConsumeKillTwo is the "run a cluster" path a user follows:
// six `raidq node` processes, `raidq topic create`, 10,000 lines through
// `raidq produce` with two nodes SIGKILLed half-way, and `raidq consume
// --count` reading every one of them back.
func TestCLIProduceConsumeKillTwo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six node processes")
	}
	bin := testBinary(t)
	c := cluster.Start(t, cluster.Config{Binary: bin, Dir: t.TempDir(), Nodes: 6})
	url := c.URL()
	cli := func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, append(args, "--nats", url, "--timeout", "20s")...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	if out, errOut, err := cli("topic", "create", "orders", "--partitions", "3"); err != nil {
		t.Fatalf("topic create: %v\n%s%s", err, out, errOut)
	}
	if _, errOut, err := cli("topic", "create", "bad", "--acks", "3"); err == nil || !strings.Contains(errOut, "W must be > n/2") {
		t.Fatalf("topic create --acks 3: want the quorum rule, got %v %s", err, errOut)
	}
	if _, errOut, err := cli("produce", "nosuch"); err == nil || !strings.Contains(errOut, "unknown topic") {
		t.Fatalf("produce to an unknown topic: want a clear error, got %v %s", err, errOut)
	}

	const total = 10000
	start := time.Now()
	// With two nodes dead a stripe needs all four others to answer within
	// an attempt's deadline, and the default 16 attempts (about 2s) run out
	// on a starved machine (the nodes answer, too late): retry each send
	// until the nodes have answered it, as the README says for a stalled
	// machine, so that what is checked is that every line gets through.
	prod := exec.Command(bin, "produce", "orders", "--nats", url, "--timeout", "20s", "--window", "256", "--delivery-timeout", "2m")
	stdin, err := prod.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var prodErr strings.Builder
	prod.Stderr = &prodErr
	if err := prod.Start(); err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(stdin)
	for i := 0; i < total; i++ {
		if i == total/2 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			c.KillNode(1)
			c.KillNode(4)
		}
		fmt.Fprintf(w, "message-%05d\n", i)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = stdin.Close()
	if err := prod.Wait(); err != nil {
		t.Fatalf("produce with two nodes killed: %v\n%s", err, prodErr.String())
	}
	if !strings.Contains(prodErr.String(), fmt.Sprintf("acked %d", total)) {
		t.Fatalf("produce: want 'acked %d', got %q", total, prodErr.String())
	}
	t.Logf("produced %d lines in %v with two nodes killed half-way", total, time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons := exec.CommandContext(ctx, bin, "consume", "orders", "--from", "earliest", "--count", fmt.Sprint(total),
		"--nats", url, "--timeout", "20s")
	out, err := cons.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var consErr strings.Builder
	cons.Stderr = &consErr
	consStart := time.Now()
	if err := cons.Start(); err != nil {
		t.Fatal(err)
	}
	got := make(map[string]int)
	b, _ := io.ReadAll(out)
	if err := cons.Wait(); err != nil {
		t.Fatalf("consume: %v\n%s", err, consErr.String())
	}
	t.Logf("consumed in %v; its log: %q", time.Since(consStart).Round(time.Millisecond), consErr.String())
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		got[line]++
	}
	for i := 0; i < total; i++ {
		if got[fmt.Sprintf("message-%05d", i)] != 1 {
			t.Fatalf("message-%05d consumed %d times (consumed %d distinct)", i, got[fmt.Sprintf("message-%05d", i)], len(got))
		}
	}
}

// runCLI runs `raidq args...` in process and returns its stdout, stderr
// and exit code.
func runCLI(args ...string) (string, string, int) {
	var out, errb strings.Builder
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestUnknownSubcommands walks the command tree: every group refuses an
// unknown subcommand with a usage error (exit 2) and prints its help
// when given none.
func TestUnknownSubcommands(t *testing.T) {
	var groups [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.HasSubCommands() {
			groups = append(groups, path)
		}
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	walk(newRoot(), nil)
	if len(groups) < 3 {
		t.Fatalf("found only the groups %v", groups)
	}
	for _, g := range groups {
		_, errOut, code := runCLI(append(slices.Clone(g), "frob")...)
		want := fmt.Sprintf("unknown command %q for %q", "frob", strings.Join(append([]string{"raidq"}, g...), " "))
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("raidq %s frob: exit %d %q, want %d and %q", strings.Join(g, " "), code, errOut, exitUsage, want)
		}
		if out, _, code := runCLI(g...); code != exitOK || !strings.Contains(out, "Usage:") {
			t.Errorf("raidq %s: exit %d, want its help and 0:\n%s", strings.Join(g, " "), code, out)
		}
	}
	if _, errOut, code := runCLI("topic", "creat"); code != exitUsage || !strings.Contains(errOut, "did you mean create?") {
		t.Errorf("raidq topic creat: exit %d %q, want a suggestion", code, errOut)
	}
}

// TestExitCodes: usage errors, an unreachable cluster and the library's
// errors get their documented codes.
func TestExitCodes(t *testing.T) {
	nowhere := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"status", "--bogus"}, exitUsage},
		{[]string{"status", "--timeout", "0s"}, exitUsage},
		{[]string{"topic", "describe"}, exitUsage},
		{[]string{"version", "extra"}, exitUsage},
		{[]string{"topic", "list", "--nats", nowhere, "--timeout", "500ms"}, exitUnreachable},
		{[]string{"status", "--nats", nowhere, "--timeout", "500ms"}, exitUnreachable},
		{[]string{"version"}, exitOK},
	} {
		if _, errOut, code := runCLI(c.args...); code != c.code {
			t.Errorf("raidq %s: exit %d, want %d; stderr %q", strings.Join(c.args, " "), code, c.code, errOut)
		}
	}
	wrap := func(err error) error { return fmt.Errorf("doing it: %w", err) }
	for _, c := range []struct {
		err  error
		code int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitFailure},
		{errFailed, exitFailure},
		{usageErr(errors.New("--x: bad")), exitUsage},
		{wrap(natsserver.ErrBadAuthConfig), exitUsage},
		{wrap(server.ErrBadOptions), exitUsage},
		{wrap(raidq.ErrUnknownTopic), exitRefused},
		{wrap(raidq.ErrInvalidParams), exitRefused},
		{wrap(meta.ErrTopicExists), exitRefused},
		{wrap(nats.ErrAuthorization), exitRefused},
		{wrap(nats.ErrPermissionViolation), exitRefused},
		{wrap(nats.ErrNoServers), exitUnreachable},
		{wrap(actors.ErrNoNodes), exitUnreachable},
		{wrap(raidq.ErrNotEnoughNodes), exitUnreachable},
		{wrap(&net.OpError{Op: "dial", Err: errors.New("refused")}), exitUnreachable},
	} {
		if got := exitCode(c.err); got != c.code {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.code)
		}
	}
}

// TestNATSEnv: --nats and --creds default to RAIDQ_NATS and RAIDQ_CREDS,
// else to the nats CLI's NATS_URL and NATS_CREDS.
func TestNATSEnv(t *testing.T) {
	t.Setenv("RAIDQ_NATS", "")
	t.Setenv("RAIDQ_CREDS", "")
	t.Setenv("NATS_URL", "nats://from-nats-url:4222")
	t.Setenv("NATS_CREDS", "/nats.creds")
	flagDefault := func(cmd *cobra.Command, name string) string { return cmd.Flags().Lookup(name).DefValue }
	for _, cmd := range []*cobra.Command{statusCmd(), topicCmd().Commands()[0]} {
		if got := flagDefault(cmd, "nats"); got != "nats://from-nats-url:4222" {
			t.Errorf("%s --nats default %q, want NATS_URL's", cmd.CommandPath(), got)
		}
		if got := flagDefault(cmd, "creds"); got != "/nats.creds" {
			t.Errorf("%s --creds default %q, want NATS_CREDS's", cmd.CommandPath(), got)
		}
		if u := cmd.Flags().Lookup("nats").Usage; !strings.Contains(u, "RAIDQ_NATS, else NATS_URL") {
			t.Errorf("%s --nats help %q", cmd.CommandPath(), u)
		}
	}
	t.Setenv("RAIDQ_NATS", "nats://from-raidq:4222")
	t.Setenv("RAIDQ_CREDS", "/raidq.creds")
	if got := flagDefault(statusCmd(), "nats"); got != "nats://from-raidq:4222" {
		t.Errorf("--nats default %q: RAIDQ_NATS must win over NATS_URL", got)
	}
	if got := flagDefault(statusCmd(), "creds"); got != "/raidq.creds" {
		t.Errorf("--creds default %q: RAIDQ_CREDS must win over NATS_CREDS", got)
	}
}

// opsAuth is the auth file of the operator-tools tests: a system user,
// an admin and a consumer.
const opsAuth = `users: [
  {user: sys, password: syspw, roles: [system]}
  {user: ops, password: opspw, roles: [admin]}
  {user: reader, password: readerpw, consumer: [orders]}
]
routes: {user: route, password: routepw}
`

// cliProc runs the raidq binary with env added to an environment
// without RAIDQ_* and NATS_* variables, and returns stdout, stderr and
// the exit code.
func cliProc(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RAIDQ_") && !strings.HasPrefix(e, "NATS_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("raidq %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// TestDevOperatorTools runs `raidq dev --auth --http-listen --log-format
// json --metrics` and the operator's tools against it: the NATS
// monitoring endpoints, JSON logs, raidq_build_info, the system account
// ($SYS.REQ.SERVER.PING as the system user, refused to an admin),
// NATS_URL, the version in `raidq status` and the exit codes of refusals.
func TestDevOperatorTools(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raidq dev process")
	}
	bin := testBinary(t)
	auth := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(auth, []byte(opsAuth), 0o600); err != nil {
		t.Fatal(err)
	}
	mport, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url, p := startDevAuth(t, bin, "--auth", auth, "--http-listen", "127.0.0.1:-1", "--log-format", "json",
		"--log-level", "info", "--metrics", fmt.Sprintf("127.0.0.1:%d", mport))
	mon := monitorURL(t, p.Stdout())
	for _, path := range []string{"/varz", "/jsz", "/connz", "/healthz"} {
		if body := httpGet(t, mon+path); !json.Valid([]byte(body)) {
			t.Errorf("GET %s: not JSON: %.200s", path, body)
		}
	}
	metricsOut := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", mport))
	if !strings.Contains(metricsOut, `raidq_build_info{goversion="go`) || !strings.Contains(metricsOut, `version="`+bus.Version()+`"} 1`) {
		t.Errorf("/metrics has no raidq_build_info:\n%s", grepLines(metricsOut, "build_info"))
	}
	checkJSONLogs(t, p.Stderr(), false)
	checkSystemAccount(t, url, 1)

	env := []string{"NATS_URL=" + url}
	admin := []string{"--user", "ops", "--password", "opspw", "--timeout", "10s"}
	out, errOut, code := cliProc(t, bin, env, append([]string{"status"}, admin...)...)
	if code != exitOK || !strings.Contains(out, "VERSION") || !strings.Contains(out, bus.Version()) || strings.Contains(out, "WARNING") {
		t.Errorf("status through NATS_URL: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := cliProc(t, bin, env, append([]string{"topic", "create", "orders"}, admin...)...); code != exitOK {
		t.Fatalf("topic create: exit %d %s", code, errOut)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{append([]string{"topic", "create", "orders"}, admin...), exitRefused},
		{append([]string{"topic", "describe", "nosuch"}, admin...), exitRefused},
		// unknown to the cluster: a partition the topic does not have
		{[]string{"consume", "orders", "--partition", "9", "--user", "reader", "--password", "readerpw", "--timeout", "10s"}, exitRefused},
		{append([]string{"topic", "create", "bad", "--acks", "3"}, admin...), exitUsage}, // checked before sending
		{[]string{"topic", "list", "--user", "ops", "--password", "wrong", "--timeout", "5s"}, exitRefused},
		{[]string{"topic", "list", "--nats", "nats://127.0.0.1:1", "--timeout", "2s"}, exitUnreachable},
	} {
		if _, errOut, code := cliProc(t, bin, env, c.args...); code != c.code {
			t.Errorf("raidq %s: exit %d, want %d; stderr %q", strings.Join(c.args, " "), code, c.code, errOut)
		}
	}
}

// startDevAuth runs `raidq dev` (six nodes, no fsync) on a free port with
// args added, until it says it is ready; a cleanup kills it. It does not
// wait for the member records (an anonymous client may not read them
// with --auth); startDev does.
func startDevAuth(t *testing.T, bin string, args ...string) (string, *cluster.Proc) {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := cluster.StartProc("raidq dev", bin, append([]string{"dev", "--nodes", "6", "--data", t.TempDir(),
		"--listen", listen, "--no-fsync"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- raidq dev, stdout:\n%s\nlast 20 lines of stderr:\n%s", p.Stdout(), p.Tail(20))
		}
	})
	if err := p.WaitStdout("press Ctrl-C to stop", time.Minute); err != nil {
		t.Fatalf("%v\nstdout:\n%s", err, p.Stdout())
	}
	return "nats://" + listen, p
}

// monitorURL finds the monitoring URL in raidq dev's description.
func monitorURL(t *testing.T, stdout string) string {
	t.Helper()
	m := regexp.MustCompile(`NATS monitoring: (http://\S+)/varz`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("raidq dev does not print its monitoring URL:\n%s", stdout)
	}
	return m[1]
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// checkJSONLogs: every stderr line is a JSON object and, with wantNATS,
// the NATS server's lines are among them (raidq dev discards its NATS
// server's log; a node logs it).
func checkJSONLogs(t *testing.T, stderr string, wantNATS bool) {
	t.Helper()
	nats := !wantNATS
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("log line is not JSON: %q", l)
			continue
		}
		nats = nats || m["component"] == "nats-server"
	}
	if !nats {
		t.Errorf("no NATS server line in the JSON logs:\n%s", stderr)
	}
}

// checkSystemAccount: the system user's $SYS.REQ.SERVER.PING and
// .PING.JSZ get answers from servers servers; the admin's is refused.
// opts are further connection options (the CA).
func checkSystemAccount(t *testing.T, url string, servers int, opts ...nats.Option) {
	t.Helper()
	sys, err := nats.Connect(url, append(slices.Clone(opts), nats.UserInfo("sys", "syspw"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	for _, subj := range []string{"$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER.PING.JSZ"} {
		var got []string
		testkit.WaitFor(t, fmt.Sprintf("%d servers to answer %s", servers, subj), func() bool {
			got = sysPing(t, sys, subj)
			return len(got) == servers
		})
	}
	refused := make(chan error, 1)
	ops, err := nats.Connect(url, append(slices.Clone(opts), nats.UserInfo("ops", "opspw"), nats.CustomInboxPrefix(bus.InboxPrefix("ops")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	if got := sysPing(t, ops, "$SYS.REQ.SERVER.PING"); len(got) != 0 {
		t.Errorf("an admin got answers from the system account: %v", got)
	}
	select {
	case err := <-refused:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("admin's $SYS request: %v, want a permission violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("admin's $SYS request was not refused")
	}
}

// sysPing publishes a system request and collects the names of the
// servers that answer within a second.
func sysPing(t *testing.T, nc *nats.Conn, subj string) []string {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subj, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var names []string
	for {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			return names
		}
		var r struct {
			Server struct{ Name string } `json:"server"`
		}
		if json.Unmarshal(m.Data, &r) == nil && r.Server.Name != "" {
			names = append(names, r.Server.Name)
		}
	}
}
