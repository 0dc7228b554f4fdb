package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raidq/raidq/scenarios/cluster"
)

// backend runs the six nodes: as processes (procBackend) or containers
// (dockerBackend). Node i is IDs()[i]; its slot store is DataDir(i)/slots.
type backend interface {
	Name() string
	Cluster() string
	IDs() []string
	// Start starts every node and waits until all are members.
	Start(ctx context.Context) error
	// ClientURL is the NATS URL list of the given nodes (nil: all).
	ClientURL(nodes []int) string
	Kill(i int) error        // SIGKILL: a crash
	Stop(i int) (int, error) // SIGTERM, wait: returns the exit code
	StartNode(i int) error   // start again on the same data
	WaitUp(ctx context.Context, nodes ...int) error
	// WaitUpOrExit waits until node i is a member (nil) or its process
	// exits (an error with the tail of its log).
	WaitUpOrExit(ctx context.Context, i int) (exited bool, err error)
	Pause(i int) error // SIGSTOP
	Resume(i int) error
	Paused(i int) bool
	Running(i int) bool
	// Isolate cuts the nodes off from every other node and client;
	// HealNet lifts every cut. Isolation() describes how it is done.
	Isolate(nodes []int) error
	HealNet() error
	Isolation() string
	DataDir(i int) string
	// ClientBinary is a raidq binary this machine can run as a client
	// (the live group's `raidq consume` processes).
	ClientBinary() string
	// ExpectExit marks node i as allowed to exit (or not) without that
	// being reported by PollExits.
	ExpectExit(i int, ok bool)
	// PollExits returns the nodes that exited unexpectedly since the last call.
	PollExits() []exitInfo
	Tail(i, lines int) string
	// StopAll stops every node gracefully (so their stores can be opened).
	StopAll()
	Close()
}

type exitInfo struct {
	node int
	code int
	tail string
}

// procBackend runs `raidq node` processes (scenarios/cluster).
type procBackend struct {
	r   *run
	c   *cluster.Cluster
	dir string
	bin string // the raidq binary (the isolated nodes run a copy)

	mu       sync.Mutex
	expected []bool          // exit allowed (the drill stopped it)
	procs    []*cluster.Proc // node i's current process
	reported []*cluster.Proc
	paused   []bool
	net      *netCut // nil: partitions freeze the nodes instead
	uids     map[int]uint32
}

func newProcBackend(r *run, dir string) (*procBackend, error) {
	bin := r.cfg.Binary
	if bin == "" {
		r.cfg.Logger.Info("drill: building the raidq binary")
		b, err := cluster.Build(dir)
		if err != nil {
			return nil, err
		}
		bin = b
	}
	b := &procBackend{r: r, dir: dir, bin: bin}
	args := []string{"--repair-interval", r.cfg.RepairInterval.String()}
	if r.cfg.NoSync {
		args = append(args, "--no-fsync")
	}
	if len(r.plan.isolate) > 0 {
		if err := b.setupNetCut(bin); err != nil {
			if r.plan.needNet {
				return nil, &skipError{reason: "needs root and iptables: " + err.Error()}
			}
			r.plan.notes = append(r.plan.notes, "partition: "+err.Error()+"; freezing the nodes (SIGSTOP) instead")
			r.cfg.Logger.Warn("drill: no network partition possible; freezing instead", "err", err)
		} else {
			bin = b.net.bin
		}
	}
	c, err := cluster.New(cluster.Config{Binary: bin, Dir: dir, Nodes: 6, Cluster: "drill", LogLevel: r.cfg.NodeLogLevel,
		Args: args, StartTimeout: 90 * time.Second,
		NodeArgs: func(i int) []string {
			var args []string
			if d := r.plan.slow[i]; d > 0 {
				args = append(args, "--reply-delay", d.String())
			}
			if r.plan.clockFault[i] {
				args = append(args, "--clock-fault")
			}
			return args
		},
		Prepare: func(i int, cmd *exec.Cmd) {
			if uid, ok := b.uids[i]; ok {
				if cmd.SysProcAttr == nil {
					cmd.SysProcAttr = &syscall.SysProcAttr{}
				}
				cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: uid}
			}
		}})
	if err != nil {
		return nil, err
	}
	b.c = c
	n := len(c.Nodes())
	b.expected, b.reported, b.paused = make([]bool, n), make([]*cluster.Proc, n), make([]bool, n)
	b.procs = make([]*cluster.Proc, n)
	if b.net != nil {
		if err := b.prepareNetDirs(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *procBackend) Name() string    { return "process" }
func (b *procBackend) Cluster() string { return b.c.Cluster() }
func (b *procBackend) IDs() []string   { return b.c.IDs() }
func (b *procBackend) DataDir(i int) string {
	return b.c.Node(i).Dir
}
func (b *procBackend) ClientBinary() string { return b.bin }

func (b *procBackend) Start(ctx context.Context) error {
	for i := range b.c.Nodes() {
		if err := b.StartNode(i); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := b.c.WaitMembers(cctx, b.c.IDs()...); err != nil {
		return fmt.Errorf("%w\n%s", err, b.tails(10))
	}
	return nil
}

func (b *procBackend) tails(lines int) string {
	var sb strings.Builder
	for i, id := range b.c.IDs() {
		if b.proc(i) != nil {
			fmt.Fprintf(&sb, "--- %s:\n%s\n", id, b.Tail(i, lines))
		}
	}
	return sb.String()
}

func (b *procBackend) ClientURL(nodes []int) string {
	if len(nodes) == 0 {
		return b.c.URL()
	}
	var urls []string
	for _, i := range nodes {
		urls = append(urls, b.c.Node(i).ClientURL())
	}
	return strings.Join(urls, ",")
}

func (b *procBackend) expect(i int, ok bool) {
	b.mu.Lock()
	b.expected[i] = ok
	b.mu.Unlock()
}

func (b *procBackend) ExpectExit(i int, ok bool) { b.expect(i, ok) }

func (b *procBackend) Kill(i int) error {
	b.expect(i, true)
	b.mu.Lock()
	b.paused[i] = false
	b.mu.Unlock()
	b.c.KillNode(i)
	return nil
}

func (b *procBackend) Stop(i int) (int, error) {
	b.expect(i, true)
	return b.c.StopNode(i, 40*time.Second)
}

func (b *procBackend) StartNode(i int) error {
	if err := b.c.StartNode(i); err != nil {
		return err
	}
	p := b.c.Node(i).Proc // written by StartNode in this goroutine
	b.mu.Lock()
	b.procs[i], b.expected[i], b.paused[i] = p, false, false
	b.mu.Unlock()
	return nil
}

func (b *procBackend) WaitUp(ctx context.Context, nodes ...int) error {
	ids := make([]string, len(nodes))
	for k, i := range nodes {
		ids[k] = b.c.IDs()[i]
	}
	if err := b.c.WaitMembers(ctx, ids...); err != nil {
		return err
	}
	return nil
}

func (b *procBackend) WaitUpOrExit(ctx context.Context, i int) (bool, error) {
	err := b.c.WaitMembers(ctx, b.c.IDs()[i])
	if err == nil {
		return false, nil
	}
	if p := b.proc(i); p != nil && p.Exited() {
		return true, fmt.Errorf("%s exited (code %d): %s", b.c.IDs()[i], p.ExitCode(), lastLine(p.Tail(20)))
	}
	return false, err
}

func (b *procBackend) proc(i int) *cluster.Proc {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.procs[i]
}

func (b *procBackend) Pause(i int) error {
	p := b.proc(i)
	if p == nil || p.Exited() {
		return fmt.Errorf("%s is not running", b.c.IDs()[i])
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	b.mu.Lock()
	b.paused[i] = true
	b.mu.Unlock()
	return nil
}

func (b *procBackend) Resume(i int) error {
	b.mu.Lock()
	b.paused[i] = false
	b.mu.Unlock()
	if p := b.proc(i); p != nil {
		return p.Signal(syscall.SIGCONT)
	}
	return nil
}

func (b *procBackend) Paused(i int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paused[i]
}

func (b *procBackend) Running(i int) bool {
	p := b.proc(i)
	return p != nil && !p.Exited()
}

func (b *procBackend) Isolation() string {
	if b.net != nil {
		return "iptables (the nodes run as their own uid; their connections are dropped both ways)"
	}
	return "SIGSTOP (no iptables: the isolated nodes are frozen)"
}

func (b *procBackend) Isolate(nodes []int) error {
	if b.net == nil {
		var errs []error
		for _, i := range nodes {
			errs = append(errs, b.Pause(i))
		}
		return errors.Join(errs...)
	}
	var ports []int
	var uids []uint32
	for _, i := range nodes {
		n := b.c.Node(i)
		ports = append(ports, n.ClientPort, n.ClusterPort)
		uids = append(uids, b.uids[i])
	}
	return b.net.cut(uids, ports)
}

func (b *procBackend) HealNet() error {
	if b.net == nil {
		return nil // frozen nodes are resumed by heal
	}
	return b.net.heal()
}

func (b *procBackend) PollExits() []exitInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []exitInfo
	for i, p := range b.procs {
		if p == nil || !p.Exited() || b.expected[i] || b.reported[i] == p {
			continue
		}
		b.reported[i] = p
		out = append(out, exitInfo{node: i, code: p.ExitCode(), tail: p.Tail(20)})
	}
	return out
}

func (b *procBackend) Tail(i, lines int) string {
	if p := b.proc(i); p != nil {
		return p.Tail(lines)
	}
	return ""
}

func (b *procBackend) StopAll() {
	var wg sync.WaitGroup
	for i := range b.c.Nodes() {
		b.expect(i, true)
		if b.Paused(i) {
			_ = b.Resume(i)
		}
		if !b.Running(i) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = b.c.StopNode(i, 40*time.Second)
		}()
	}
	wg.Wait()
}

func (b *procBackend) Close() {
	for i := range b.c.Nodes() {
		b.expect(i, true)
	}
	if b.net != nil {
		_ = b.net.close()
	}
	b.c.Close()
}

// lastLine is the last non-empty line of s (a log tail), shortened.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for k := len(lines) - 1; k >= 0; k-- {
		l := strings.TrimSpace(lines[k])
		if l == "" {
			continue
		}
		// Prefer the line that says why (errors name the cause).
		for j := len(lines) - 1; j >= 0 && j >= len(lines)-8; j-- {
			if strings.Contains(lines[j], "level=ERROR") || strings.HasPrefix(lines[j], "raidq:") {
				l = strings.TrimSpace(lines[j])
				break
			}
		}
		if len(l) > 400 {
			l = l[:400] + "…"
		}
		return l
	}
	return "(no output)"
}

// wipeDir removes a directory's contents (the drill's "new disk").
func wipeDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
