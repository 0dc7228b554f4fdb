package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/raidq/raidq/actors/server"
	"github.com/raidq/raidq/scenarios/testkit"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestProduceKeySeparator: produce --key-separator : sends "k:v" lines
// as key k, value v (kcat -K:), reports a line without the separator as
// failed (exit 1) without sending it; consume reads back exactly the two
// keyed records.
func TestProduceKeySeparator(t *testing.T) {
	lc, err := server.StartLocalCluster(server.LocalClusterConfig{Dir: t.TempDir(), Logger: testkit.Logger(t, slog.LevelWarn),
		Cluster: "keys", Listen: "127.0.0.1:-1", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if err := lc.CreateTopic("orders", 2, quorum.Default()); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--nats", lc.ClientURL(), "--cluster", "keys", "--timeout", "20s"}

	var stdout, stderr bytes.Buffer
	root := newRoot()
	root.SetArgs(append([]string{"produce", "orders", "--key-separator", ":"}, flags...))
	root.SetIn(strings.NewReader("k1:hello\nno separator here\nk2:wor:ld\n"))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err = root.Execute()
	if code := exitCode(err); code != exitFailure || !strings.Contains(stderr.String(), "acked 2") ||
		!strings.Contains(stderr.String(), `line 2: no key separator ":"`) {
		t.Fatalf("produce --key-separator: exit %d (%v), stderr %q", code, err, stderr.String())
	}

	out, errOut, code := runCLI(append([]string{"consume", "orders", "--from", "earliest", "--json", "--count", "2"}, flags...)...)
	if code != exitOK {
		t.Fatalf("consume: exit %d %q", code, errOut)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m consumed
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("consume --json line %q: %v", line, err)
		}
		got[m.Key] = m.Value
	}
	if len(got) != 2 || got["k1"] != "hello" || got["k2"] != "wor:ld" {
		t.Fatalf("consumed %v, want k1=hello and k2=wor:ld only", got)
	}
}
