package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/bus/natsserver"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestCLIRefusals: against a dev cluster with an auth file (what `raidq
// dev --auth` runs, in process), a command the user's permissions refuse
// exits 4 at the refusal, saying which user may not use which subject and
// what the auth file lacks: consume of a topic the user may not read,
// consume --group outside its groups:, produce to a topic it may not
// write (retrying for a minute otherwise), topic create without the admin
// role (waiting out --timeout otherwise).
func TestCLIRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	auth, err := natsserver.ParseAuthConfig([]byte(`
users: [
  {user: ops, password: opspw, roles: [admin]}
  {user: shop, password: shoppw, producer: [orders]}
  {user: reader, password: readerpw, consumer: [orders], groups: [billing]}
]`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: filepath.Join(dir, "dev"), Cluster: "refuse",
		Listen: "127.0.0.1:-1", NoSync: true, Auth: auth, Logger: testkit.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	for _, name := range []string{"orders", "payments"} {
		if err := lc.CreateTopic(name, 2, quorum.Default()); err != nil {
			t.Fatal(err)
		}
	}
	lines := filepath.Join(dir, "lines")
	if err := os.WriteFile(lines, []byte("a\nb\nc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	as := func(user string, args ...string) []string {
		return append(args, "--nats", lc.ClientURL(), "--cluster", "refuse", "--user", user, "--password", user+"pw", "--timeout", "20s")
	}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"consume", as("reader", "consume", "payments", "--from", "earliest"),
			[]string{"user reader", `"raidq.refuse.scan.`, ".payments.", "consumer: [...]"}},
		{"consume --group", as("reader", "consume", "orders", "--group", "other"),
			[]string{"user reader", `"$KV.raidq_refuse_groups.g.other.orders.`, "groups:"}},
		{"produce", as("shop", "produce", "payments", "--file", lines, "--delivery-timeout", "1m"),
			[]string{"user shop", `"raidq.refuse.slot.`, ".payments.", "producer: [...]"}},
		{"topic create", as("shop", "topic", "create", "rogue"),
			[]string{"user shop", `"$KV.raidq_refuse_meta.topic.rogue"`, "roles: [admin]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			type result struct {
				errOut string
				code   int
			}
			done := make(chan result, 1)
			go func() {
				_, errOut, code := runCLI(c.args...)
				done <- result{errOut, code}
			}()
			// A failure bound only: the command ends at the refusal.
			select {
			case r := <-done:
				if r.code != exitRefused {
					t.Fatalf("raidq %s: exit %d, want %d (refused)\n%s", strings.Join(c.args, " "), r.code, exitRefused, r.errOut)
				}
				for _, w := range c.want {
					if !strings.Contains(r.errOut, w) {
						t.Errorf("raidq %s: stderr does not say %q:\n%s", c.name, w, r.errOut)
					}
				}
			case <-time.After(refusalBound):
				t.Fatalf("raidq %s: still running %v after it started; a refusal must end it", c.name, refusalBound)
			}
		})
	}
}

// refusalBound bounds how long a refused command may run.
const refusalBound = 15 * time.Second
