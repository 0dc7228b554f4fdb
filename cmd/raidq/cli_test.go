package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq/scenarios/cluster"
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
