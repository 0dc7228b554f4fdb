package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/scenarios/cluster"
	"github.com/raidq/raidq/scenarios/testkit"
)

// TestKcat runs kcat (librdkafka) against `raidq dev --kafka-listen`:
// -L lists the topic; -P produces keyed lines (plain, zstd, lz4); -C -e
// and a -G group print exactly what kcat and the Go API produced and
// exit; the Go API reads what kcat produced.
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed: apt-get install kcat")
	}
	bin := testBinary(t)
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	url, _ := startDev(t, bin, "--kafka-listen", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	from := time.Now()
	createTopic(ctx, t, url, "kt", 3)
	k := kcatRunner{t: t, bin: kcat, addr: addr}
	testkit.WaitFor(t, "kcat -L to list topic kt", func() bool {
		out, _, err := k.try("", "-L", "-t", "kt")
		return err == nil && strings.Contains(out, `topic "kt" with 3 partitions`)
	})

	want := []string{"k1=v1", "k2=v2", "k3=v3", "k4=zstd4", "k5=zstd5", "k6=lz4"}
	k.run("k1:v1\nk2:v2\nk3:v3\n", "-P", "-t", "kt", "-K:")
	k.run("k4:zstd4\nk5:zstd5\n", "-P", "-t", "kt", "-K:", "-z", "zstd")
	k.run("k6:lz4\n", "-P", "-t", "kt", "-K:", "-z", "lz4")
	cl, err := raidq.Connect(url, raidq.WithLogger(testkit.Logger(t, 4)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want = append(want, produceNative(ctx, t, cl, "kt", 3)...)
	slices.Sort(want)

	// The Go API reads everything (a Consumer without WithStart starts
	// now). Reading waits out the read delay, too: kcat -e right after the
	// produce could exit before the records acked within the last read
	// delay (the gateway's high watermark leaves them out).
	if got := readNative(ctx, t, cl, "kt", from, len(want)); !slices.Equal(got, want) {
		t.Fatalf("the Go API read %q, want %q", got, want)
	}
	format := []string{"-o", "beginning", "-e", "-f", `%k=%s\n`}
	if got := lines(k.run("", append([]string{"-C", "-t", "kt"}, format...)...)); !slices.Equal(got, want) {
		t.Fatalf("kcat -C printed %q, want %q", got, want)
	}
	if got := lines(k.run("", append([]string{"-G", "kcat-group", "kt"}, format...)...)); !slices.Equal(got, want) {
		t.Fatalf("kcat -G printed %q, want %q", got, want)
	}
}

// kcatRunner runs kcat against one broker address.
type kcatRunner struct {
	t    *testing.T
	bin  string
	addr string
}

// try runs kcat -b addr args with stdin (60 s at most).
func (k kcatRunner) try(stdin string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"-b", k.addr}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// run is try that fails the test if kcat fails or reports an error.
func (k kcatRunner) run(stdin string, args ...string) string {
	k.t.Helper()
	start := time.Now()
	out, errOut, err := k.try(stdin, args...)
	if err != nil || strings.Contains(errOut, "ERROR") {
		k.t.Fatalf("kcat %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	k.t.Logf("kcat %s: %v\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), errOut)
	return out
}

// produceNative sends n keyed records through the Go API and returns
// them as "key=value".
func produceNative(ctx context.Context, t *testing.T, cl *raidq.Client, topic string, n int) []string {
	t.Helper()
	p, err := cl.Producer(topic)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var sent []string
	for i := range n {
		m := raidq.Message{Key: fmt.Appendf(nil, "native%d", i), Value: fmt.Appendf(nil, "go%d", i)}
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatalf("native send %d: %v", i, err)
		}
		sent = append(sent, string(m.Key)+"="+string(m.Value))
	}
	return sent
}

// readNative reads n records of topic from the time from through the Go
// API and returns them as sorted "key=value".
func readNative(ctx context.Context, t *testing.T, cl *raidq.Client, topic string, from time.Time, n int) []string {
	t.Helper()
	c, err := cl.Consumer(topic, raidq.WithStart(from))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []string
	for len(got) < n {
		m, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("native read after %d records (%q): %v", len(got), got, err)
		}
		got = append(got, string(m.Key)+"="+string(m.Value))
	}
	slices.Sort(got)
	return got
}

// lines splits kcat's output into sorted lines.
func lines(out string) []string {
	ls := strings.Split(strings.TrimSpace(out), "\n")
	slices.Sort(ls)
	return ls
}
