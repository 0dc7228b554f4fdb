package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/raidq/raidq/bus/meta"
)

// TestTopicAlterAgainstDev runs create --json, alter and add-partitions
// against a `raidq dev` cluster, as an operator would.
func TestTopicAlterAgainstDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raidq dev cluster")
	}
	url, _ := startDev(t, testBinary(t))
	cli := func(args ...string) (string, string, int) { return runCLI(append(args, "--nats", url)...) }

	out, errOut, code := cli("topic", "create", "orders", "--json")
	var r meta.TopicRecord
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Name != "orders" || r.Partitions != 1 {
		t.Fatalf("create --json: code %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("topic", "alter", "orders", "--retention", "1h"); code != 0 || !strings.Contains(out, "retention 1h0m0s") {
		t.Fatalf("alter --retention: code %d, %q %q", code, out, errOut)
	}
	// Lowering A and D together must wait for A: refused without --wait.
	if out, errOut, code = cli("topic", "alter", "orders", "--latency", "low"); code != exitRefused || !strings.Contains(errOut, "lower the accept window first") {
		t.Fatalf("alter --latency low without --wait: code %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("topic", "alter", "orders", "--accept-window", "100ms", "--json"); code != 0 {
		t.Fatalf("alter --accept-window: code %d, %q %q", code, out, errOut)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.AcceptFrom == 0 || r.PrevAcceptWindow == 0 {
		t.Fatalf("alter --json shows no pending change: %v %q", err, out)
	}
	if out, errOut, code = cli("topic", "alter", "orders", "--accept-window", "200ms"); code != exitRefused || !strings.Contains(errOut, "still taking effect") {
		t.Fatalf("second change of A before the first is in force: code %d, %q %q", code, out, errOut)
	}
	if out, _, _ = cli("topic", "describe", "orders"); !strings.Contains(out, "accept change  250ms for offsets before") {
		t.Fatalf("describe does not show the pending change:\n%s", out)
	}
	if out, errOut, code = cli("topic", "alter", "orders"); code != exitUsage {
		t.Fatalf("alter with nothing to change: code %d, %q %q", code, out, errOut)
	}
	out, errOut, code = cli("topic", "add-partitions", "orders", "--count", "3")
	if code != 0 || !strings.Contains(out, "3 partitions (was 1)") || !strings.Contains(errOut, "WARNING: keyed messages") {
		t.Fatalf("add-partitions: code %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("topic", "add-partitions", "orders", "--count", "2"); code != exitRefused {
		t.Fatalf("add-partitions to fewer: code %d, %q %q", code, out, errOut)
	}
}
