// Package cluster runs raidq storage nodes as separate processes
// (`raidq node`) for integration tests and failure drills: build the
// binary, pick free ports, start a clustered set of nodes with a full
// route list, wait until they are members in the metadata, stop them
// gracefully (SIGTERM) or kill them (SIGKILL), restart them on their data.
//
// Building and ports:
//
//	bin := cluster.BuildBinary(t)       // go build ./cmd/raidq into t.TempDir()
//	bin, err := cluster.Build(dir)      // the same without testing.TB
//	ports, err := cluster.FreePorts(n)  // distinct free 127.0.0.1 ports
//
// Any process:
//
//	p, err := cluster.StartProc(name, bin, args, env...)
//	p.Stop(timeout) (exit code, error)  // SIGTERM, wait; kills on timeout
//	p.Kill()                            // SIGKILL and wait
//	p.Wait(timeout), p.Signal(sig), p.Exited(), p.ExitCode(), p.Done(), p.Check()
//	p.Stdout(), p.Stderr(), p.Tail(lines), p.WaitStderr/WaitStdout(substr, timeout)
//
// Children die with the test process on Linux (parent-death signal), so a
// test that panics or times out leaves no node behind.
//
// A cluster of node processes:
//
//	c := cluster.Start(t, cluster.Config{Binary: bin, Dir: t.TempDir(), Nodes: 6})
//	// New + Start + WaitMembers; t.Cleanup kills whatever runs and, if the
//	// test failed, logs the tail of every node's stderr.
//	c.URL()                  // every client URL, comma-separated (nats.Connect, --nats)
//	c.Nodes()[i]             // *Node: ID, Dir, ClientPort, ClusterPort, Proc, ClientURL(), RouteURL()
//	c.StopNode(i, timeout)   // SIGTERM: graceful; returns the exit code
//	c.KillNode(i)            // SIGKILL: a crash
//	c.StartNode(i)           // (re)start on the same data dir and ports
//	c.WaitMembers(ctx, ids...) // each id's current process wrote its member record
//	c.Close()                // SIGKILL every running node
//
// Without testing.TB: New(cfg), then Start() and Close(). Node ids are n0,
// n1, ...; node i keeps its data in Dir/<id> and its ports across restarts.
// WaitMembers(ctx, url, cluster, ids, since, check) (the function) works
// against any raidq cluster, including `raidq dev`.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/raidq/raidq/bus/meta"
)

// Config describes a cluster of node processes.
type Config struct {
	Binary  string // the raidq binary (Build); required
	Dir     string // node i's data directory is Dir/<id>; required
	Nodes   int    // default 6
	Cluster string // raidq cluster name; default "raidq"
	Host    string // listen host; default 127.0.0.1
	// LogLevel of the nodes (default "info": enough to debug a failure;
	// the output stays in memory).
	LogLevel string
	// Args are added to every node's command line (e.g. "--no-fsync").
	Args []string
	// NodeArgs, if set, adds arguments to node i's command line only
	// (e.g. a reply delay on some nodes).
	NodeArgs func(i int) []string
	// Prepare, if set, adjusts node i's command just before it starts
	// (drills run a node under another uid to cut it off with iptables).
	Prepare func(i int, cmd *exec.Cmd)
	// Env entries are added to every node's environment.
	Env []string
	// StartTimeout bounds Start's wait for the member records (default 60s).
	StartTimeout time.Duration
}

// Node is one node process of a Cluster.
type Node struct {
	ID          string
	Dir         string
	ClientPort  int
	ClusterPort int
	host        string
	// Proc is the current process (nil before the first start), Started
	// when it was started.
	Proc    *Proc
	Started time.Time
}

// ClientURL is the node's NATS client URL.
func (n *Node) ClientURL() string {
	return "nats://" + joinHostPort(n.host, n.ClientPort)
}

// RouteURL is the node's NATS route URL.
func (n *Node) RouteURL() string {
	return "nats-route://" + joinHostPort(n.host, n.ClusterPort)
}

func joinHostPort(h string, p int) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]:" + strconv.Itoa(p)
	}
	return h + ":" + strconv.Itoa(p)
}

// Cluster is a set of `raidq node` processes sharing one route list.
type Cluster struct {
	cfg   Config
	mu    sync.Mutex
	nodes []*Node
}

// New plans a cluster (ids, data directories, free ports) without
// starting anything.
func New(cfg Config) (*Cluster, error) {
	if cfg.Binary == "" || cfg.Dir == "" {
		return nil, errors.New("cluster: Binary and Dir are required")
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 6
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "raidq"
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	ports, err := FreePorts(2 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	for i := range cfg.Nodes {
		id := fmt.Sprintf("n%d", i)
		c.nodes = append(c.nodes, &Node{ID: id, Dir: cfg.Dir + "/" + id, ClientPort: ports[2*i],
			ClusterPort: ports[2*i+1], host: cfg.Host})
	}
	return c, nil
}

// Start starts every node, then waits (StartTimeout) until all are
// members with fresh heartbeats. On error the nodes keep running: call
// Close.
func (c *Cluster) Start() error {
	for i := range c.nodes {
		if err := c.StartNode(i); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StartTimeout)
	defer cancel()
	return c.WaitMembers(ctx, c.IDs()...)
}

// Start is New and Start for a test: it fails tb on error and registers a
// cleanup that kills every node and, if tb failed, logs the tail of every
// node's stderr.
func Start(tb TB, cfg Config) *Cluster {
	tb.Helper()
	c, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		if tb.Failed() {
			c.LogTails(tb, 40)
		}
	})
	if err := c.Start(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Nodes lists the nodes.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns node i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// IDs lists the node ids.
func (c *Cluster) IDs() []string {
	ids := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		ids[i] = n.ID
	}
	return ids
}

// Routes is the full route list every node is given.
func (c *Cluster) Routes() []string {
	r := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		r[i] = n.RouteURL()
	}
	return r
}

// URLs lists the client URLs of every node.
func (c *Cluster) URLs() []string {
	u := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		u[i] = n.ClientURL()
	}
	return u
}

// URL is every client URL, comma-separated (nats.Connect, the CLI's --nats).
func (c *Cluster) URL() string { return strings.Join(c.URLs(), ",") }

// Cluster is the raidq cluster name.
func (c *Cluster) Cluster() string { return c.cfg.Cluster }

// Args returns the command line of node i (without the binary).
func (c *Cluster) Args(i int) []string {
	n := c.nodes[i]
	args := []string{"node", "--insecure", "--id", n.ID, "--data", n.Dir, "--cluster", c.cfg.Cluster,
		"--listen", joinHostPort(n.host, n.ClientPort), "--cluster-listen", joinHostPort(n.host, n.ClusterPort),
		"--routes", strings.Join(c.Routes(), ","), "--log-level", c.cfg.LogLevel}
	args = append(args, c.cfg.Args...)
	if c.cfg.NodeArgs != nil {
		args = append(args, c.cfg.NodeArgs(i)...)
	}
	return args
}

// StartNode starts node i (again), on its data directory and ports. It
// does not wait for the node to be ready (see WaitMembers).
func (c *Cluster) StartNode(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.Proc != nil && !n.Proc.Exited() {
		return fmt.Errorf("cluster: node %s is running", n.ID)
	}
	started := time.Now()
	var prepare func(*exec.Cmd)
	if c.cfg.Prepare != nil {
		prepare = func(cmd *exec.Cmd) { c.cfg.Prepare(i, cmd) }
	}
	p, err := startProc(n.ID, c.cfg.Binary, c.Args(i), c.cfg.Env, prepare)
	if err != nil {
		return err
	}
	n.Proc, n.Started = p, started
	return nil
}

// StopNode stops node i gracefully (SIGTERM) and returns its exit code; a
// node still running after timeout is killed and an error returned.
func (c *Cluster) StopNode(i int, timeout time.Duration) (int, error) {
	p := c.proc(i)
	if p == nil {
		return -1, fmt.Errorf("cluster: node %s was never started", c.nodes[i].ID)
	}
	return p.Stop(timeout)
}

// KillNode kills node i (SIGKILL), as a crash would, and waits for it to go.
func (c *Cluster) KillNode(i int) {
	if p := c.proc(i); p != nil {
		p.Kill()
	}
}

func (c *Cluster) proc(i int) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].Proc
}

// Close kills every running node.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.KillNode(i)
		}()
	}
	wg.Wait()
}

// LogTails logs the last lines of every node's stderr to tb.
func (c *Cluster) LogTails(tb TB, lines int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if p := n.Proc; p != nil {
			tb.Logf("--- node %s (exit code %d), last %d lines of stderr:\n%s", n.ID, p.ExitCode(), lines, p.Tail(lines))
		}
	}
}

// exited returns an error naming the first node whose process exited.
func (c *Cluster) exited(ids []string) error {
	want := make(map[string]bool)
	for _, id := range ids {
		want[id] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if p := n.Proc; p != nil && want[n.ID] && p.Exited() {
			return fmt.Errorf("node %s exited (code %d):\n%s", n.ID, p.ExitCode(), p.Tail(15))
		}
	}
	return nil
}

// WaitMembers waits until every id's current process has written its
// member record (a heartbeat newer than the process's start, so a record
// left by an earlier process does not count), failing early if one of
// those processes exits.
func (c *Cluster) WaitMembers(ctx context.Context, ids ...string) error {
	since := make(map[string]time.Time)
	c.mu.Lock()
	for _, n := range c.nodes {
		since[n.ID] = n.Started
	}
	c.mu.Unlock()
	var want []string
	for _, id := range ids {
		if _, ok := since[id]; !ok {
			return fmt.Errorf("cluster: no node %q", id)
		}
		want = append(want, id)
	}
	return waitMembers(ctx, c.URL(), c.cfg.Cluster, want, func(id string) time.Time { return since[id] },
		func() error { return c.exited(ids) })
}

// HeartbeatSlack is a bit more than a node's heartbeat period (2s): a
// member whose heartbeat is older than that is not running.
const HeartbeatSlack = 3 * time.Second

// WaitMembers waits until the raidq cluster reachable at url (one or more
// comma-separated NATS URLs) lists every id as a member whose heartbeat is
// newer than since (time.Now().Add(-HeartbeatSlack): running now; the time
// a node was restarted: running again). check, if not nil, is called on
// every poll and ends the wait with its error (e.g. a node process exited).
func WaitMembers(ctx context.Context, url, cluster string, ids []string, since time.Time, check func() error) error {
	return waitMembers(ctx, url, cluster, ids, func(string) time.Time { return since }, check)
}

func waitMembers(ctx context.Context, url, cluster string, ids []string, since func(id string) time.Time, check func() error) error {
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	var nc *nats.Conn
	var store *meta.Store
	defer func() {
		if nc != nil {
			nc.Close()
		}
	}()
	last := errors.New("not started")
	for {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		switch {
		case nc == nil:
			var err error
			nc, err = nats.Connect(url, nats.Name("raidq-cluster-wait"), nats.Timeout(2*time.Second))
			if err != nil {
				nc, last = nil, fmt.Errorf("connect: %w", err)
			}
		case store == nil:
			// Short: a request sent before JetStream settles can go unanswered.
			octx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			s, err := meta.Open(octx, nc, cluster, meta.Options{Timeout: 2 * time.Second, Logger: discard})
			cancel()
			if err != nil {
				last = fmt.Errorf("metadata: %w", err)
			} else {
				store = s
			}
		default:
			ms, err := store.Members(ctx)
			if err != nil {
				last = fmt.Errorf("members: %w", err)
				break
			}
			fresh := make(map[string]bool)
			for _, m := range ms {
				if m.Heartbeat >= since(m.ID).UnixNano() {
					fresh[m.ID] = true
				}
			}
			var missing []string
			for _, id := range ids {
				if !fresh[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) == 0 {
				return nil
			}
			last = fmt.Errorf("no fresh member record for %s", strings.Join(missing, " "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for members %s: %w (last: %v)", strings.Join(ids, " "), ctx.Err(), last)
		case <-poll.C:
		}
	}
}

var discard = slog.New(slog.DiscardHandler)
