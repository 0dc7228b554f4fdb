package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq/bus"
)

// TestLocalInputExitCodes runs every command that checks its input before
// sending anything with bad input, and wants exit 2 (3 for a health check
// of a port nothing listens on). The client commands are pointed at a
// port nothing listens on: a check that ran only after connecting would
// show as exit 3. It walks the command tree so a new command must either
// appear here or be listed as having no local checks.
func TestLocalInputExitCodes(t *testing.T) {
	for _, env := range []string{"RAIDQ_NKEY", "RAIDQ_TLS_CA", "RAIDQ_TLS_CERT", "RAIDQ_TLS_KEY", "RAIDQ_CREDS", "NATS_CREDS", "RAIDQ_CLUSTER"} {
		t.Setenv(env, "")
	}
	t.Setenv("RAIDQ_NATS", fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)))
	missing := filepath.Join(t.TempDir(), "missing")
	dir := t.TempDir()
	health := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a seed or a PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(dir, "shop.nk")
	if code := run([]string{"security", "nkey", "--out", seed}, io.Discard, io.Discard); code != exitOK {
		t.Fatalf("security nkey: exit %d", code)
	}
	cases := []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"topic", "create", "X", "--partitions", "0"}, exitUsage, "--partitions 0"},
		{[]string{"topic", "create", "x", "--acks", "3"}, exitUsage, "W=3"},
		{[]string{"topic", "create", "x", "--latency", "fast"}, exitUsage, `"fast"`},
		{[]string{"topic", "create", "a b"}, exitUsage, "topic name"},
		{[]string{"topic", "create", "x", "--data-shards", "0"}, exitUsage, "k=0"},
		{[]string{"topic", "create", "x", "--retention", "7x"}, exitUsage, "--retention"},
		{[]string{"topic", "create", "x", "--retention", "-1h"}, exitUsage, "negative"},
		{[]string{"topic", "describe", "a.b"}, exitUsage, "topic name"},
		{[]string{"topic", "delete", "a*"}, exitUsage, "topic name"},
		{[]string{"topic", "alter", "a b", "--retention", "1h"}, exitUsage, "topic name"},
		{[]string{"topic", "alter", "x"}, exitUsage, "nothing to change"},
		{[]string{"topic", "alter", "x", "--latency", "fast"}, exitUsage, `"fast"`},
		{[]string{"topic", "alter", "x", "--retention", "1q"}, exitUsage, "--retention"},
		{[]string{"topic", "add-partitions", "x", "--count", "0"}, exitUsage, "--count 0"},
		{[]string{"topic", "list", "--nkey", missing}, exitUsage, "--nkey"},
		{[]string{"topic", "list", "--tls-ca", missing}, exitUsage, "--tls-ca"},
		{[]string{"topic", "list", "--tls-ca", dir}, exitUsage, "is a directory"},
		{[]string{"topic", "list", "--creds", missing}, exitUsage, "--creds"},
		{[]string{"topic", "list", "--cluster", "a.b"}, exitUsage, "cluster name"},
		{[]string{"topic", "list", "--user", "ops", "--nkey", seed}, exitUsage, "give one of"},
		{[]string{"topic", "list", "--password", "pw"}, exitUsage, "needs a user"},
		{[]string{"topic", "list", "--nkey", garbage}, exitUsage, "want a user seed"},
		{[]string{"topic", "list", "--tls-ca", garbage}, exitUsage, "TLS CA"},
		{[]string{"produce", "t", "--file", missing}, exitUsage, "--file"},
		{[]string{"produce", "t", "--window", "0"}, exitUsage, "--window 0"},
		{[]string{"produce", "t", "--delivery-timeout", "-1s"}, exitUsage, "--delivery-timeout"},
		{[]string{"produce", "a b"}, exitUsage, "topic name"},
		{[]string{"produce", "t", "--key", "k", "--key-separator", ":"}, exitUsage, "key-separator"},
		{[]string{"consume", "a b"}, exitUsage, "topic name"},
		{[]string{"consume", "t", "--from", "bogus"}, exitUsage, "--from"},
		{[]string{"consume", "t", "--count", "-1"}, exitUsage, "--count"},
		{[]string{"status", "--timeout", "0s"}, exitUsage, "--timeout"},
		{[]string{"status", "--nkey", missing}, exitUsage, "--nkey"},
		{[]string{"group", "list", "--nkey", missing}, exitUsage, "--nkey"},
		{[]string{"group", "describe", "g", "--tls-ca", missing}, exitUsage, "--tls-ca"},
		{[]string{"group", "reset", "g", "--topic", "t", "--to", "bogus"}, exitUsage, "bogus"},
		{[]string{"group", "delete", "g", "--creds", missing}, exitUsage, "--creds"},
		{[]string{"demo", "--kill", "7"}, exitUsage, "--kill 7"},
		{[]string{"demo", "--size", "1"}, exitUsage, "--size 1"},
		{[]string{"health", "--metrics-addr", health, "--timeout", "5s"}, exitUnreachable, "nothing listening"},
		{[]string{"health", "--timeout", "0s"}, exitUsage, "--timeout"},
		{[]string{"health", "--metrics-addr", "nohost"}, exitUsage, "--metrics-addr"},
		{[]string{"health", "--url", "ftp://x/healthz"}, exitUsage, "--url"},
		{[]string{"node", "--id", "n1", "--data", dir}, exitUsage, "--insecure"},
		{[]string{"node", "--config", missing}, exitUsage, "--config"},
		{[]string{"node", "--insecure", "--id", "n1", "--data", dir, "--auth", missing}, exitUsage, "--auth"},
		{[]string{"node", "--insecure", "--id", "n1", "--data", dir, "--kafka-auth", missing}, exitUsage, "--kafka-auth"},
		{[]string{"dev", "--listen", ""}, exitUsage, "--listen"},
		{[]string{"dev", "--auth", missing}, exitUsage, "--auth"},
		{[]string{"kafka"}, exitUsage, "--listen"},
		{[]string{"bench", "--repeat", "0"}, exitUsage, "--repeat"},
		{[]string{"drill", "kill-2", "--latency", "bogus"}, exitUsage, "--latency"},
		{[]string{"drill", "kill-2", "--binary", missing}, exitUsage, "--binary"},
		{[]string{"drill", "nosuch"}, exitUsage, "unknown drill"},
		{[]string{"consume", "orders", "--idle", "-1s"}, exitUsage, "--idle"},
		{[]string{"security", "nkey", "--out", missing, "--bogus"}, exitUsage, "--bogus"},
		{[]string{"security", "certs"}, exitUsage, "--name"},
		{[]string{"security", "nats-config", "--auth", missing}, exitUsage, "--auth"},
		{[]string{"version", "extra"}, exitUsage, "unknown command"},
		{[]string{"natsd"}, exitUsage, "--name and --data are required"},
	}
	// Commands without a check of their own beyond cobra's flag parsing
	// (which TestExitCodes covers), or whose checks are not local yet.
	noLocalChecks := map[string]string{
		"raidq help": "", "raidq completion bash": "", "raidq completion zsh": "", "raidq completion fish": "",
		"raidq completion powershell": "", "raidq security passwd": "reads stdin only",
		"raidq security drill": "drill.go's checks run after it starts the nodes (exit 1)",
	}
	covered := map[string]bool{}
	for _, c := range cases {
		_, errOut, code := runCLI(c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("raidq %q: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
		if strings.Contains(errOut, "requires TLS") {
			t.Errorf("raidq %q: a wrong hint: %q", c.args, errOut)
		}
		path := "raidq"
		root := newRoot()
		if cmd, _, err := root.Find(c.args); err == nil {
			path = cmd.CommandPath()
		}
		covered[path] = true
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.HasSubCommands() {
			return
		}
		if _, ok := noLocalChecks[c.CommandPath()]; !ok && !covered[c.CommandPath()] {
			t.Errorf("%s: no case with bad local input (add one, or list it in noLocalChecks)", c.CommandPath())
		}
	}
	walk(newRoot())
	// A name the library checks after connecting (group reset --topic,
	// a Go caller's) is input wrong too, not a refusal.
	if code := exitCode(fmt.Errorf("reset: %w", bus.ValidName("topic", "a b"))); code != exitUsage {
		t.Errorf("an invalid name from the library: exit %d, want %d", code, exitUsage)
	}
	if len(covered) < 20 {
		t.Fatalf("the table covers only %d commands: %v", len(covered), covered)
	}
}
