package drill

import (
	"bytes"
	"context"
	"debug/elf"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raidq/raidq/scenarios/cluster"
)

// The image and the compose file users run (docs/drills.md); the drill
// runs the same compose file under its own project name.
var (
	//go:embed docker/Dockerfile
	dockerfile []byte
	//go:embed docker/compose.yaml
	composeFile []byte
)

// DockerConfig runs a drill's nodes as containers: an image built FROM
// scratch from a static raidq binary and docker/compose.yaml, with data
// directories bind-mounted from the drill's directory (so corrupt, wipe
// and the lost-record analysis work on them from here). Pause is `docker
// pause` (the cgroup freezer) and a partition disconnects containers from
// the compose network.
type DockerConfig struct {
	// Binary is a static (CGO_ENABLED=0) raidq binary for the image; empty
	// builds one with the go command (from within the module).
	Binary string
	// Image is the tag to build (default raidq:drill).
	Image string
}

// DockerAvailable says whether a Docker engine answers (`docker info`) and
// a compose command exists; the error says what is missing.
func DockerAvailable() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("no docker command in PATH")
	}
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Errorf("docker info: %v: %s", err, short(strings.TrimSpace(string(out)), 300))
	}
	if _, err := composeCommand(); err != nil {
		return err
	}
	return nil
}

// composeCommand is `docker compose` (the plugin) or `docker-compose`.
func composeCommand() ([]string, error) {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}, nil
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}, nil
	}
	return nil, errors.New("neither `docker compose` nor `docker-compose` is available")
}

// projects numbers the compose projects of this process (one per drill).
var projects atomic.Int32

type dockerBackend struct {
	r       *run
	dir     string
	project string
	compose []string
	env     []string
	ports   []int
	ids     []string

	mu         sync.Mutex
	containers []string
	started    []time.Time
	expected   []bool
	paused     []bool
	reported   []string // the container state already reported (by StartedAt)
	lastPoll   time.Time
	isolated   []int
}

// newDockerBackend prepares the Docker backend (ports, the image, the
// compose file, the containers' environment); no container runs yet.
func newDockerBackend(r *run, dir string) (backend, error) {
	if err := DockerAvailable(); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	dc := *r.cfg.Docker
	if dc.Image == "" {
		dc.Image = "raidq:drill"
	}
	compose, _ := composeCommand()
	b := &dockerBackend{r: r, dir: dir, compose: compose, project: fmt.Sprintf("raidqdrill%d%c", os.Getpid(), 'a'+rune(projects.Add(1)%26))}
	for i := range nodes {
		b.ids = append(b.ids, fmt.Sprintf("n%d", i))
	}
	n := len(b.ids)
	b.containers, b.started, b.expected, b.paused, b.reported = make([]string, n), make([]time.Time, n), make([]bool, n),
		make([]bool, n), make([]string, n)
	ports, err := cluster.FreePorts(n)
	if err != nil {
		return nil, err
	}
	b.ports = ports
	if err := buildDockerImage(r, dir, dc); err != nil {
		return nil, err
	}
	cf := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(cf, composeFile, 0o644); err != nil {
		return nil, err
	}
	b.compose = append(b.compose, "-p", b.project, "-f", cf)
	b.env = append(os.Environ(), "RAIDQ_IMAGE="+dc.Image, "RAIDQ_CLUSTER=drill", "RAIDQ_DATA="+dir,
		"RAIDQ_LOG_LEVEL="+r.cfg.NodeLogLevel, "RAIDQ_REPAIR_INTERVAL="+r.cfg.RepairInterval.String())
	for i := range n {
		b.env = append(b.env, fmt.Sprintf("RAIDQ_PORT_N%d=%d", i, ports[i]))
		if d := r.plan.slow[i]; d > 0 {
			b.env = append(b.env, fmt.Sprintf("RAIDQ_DELAY_N%d=%s", i, d))
		}
		if r.plan.clockFault[i] {
			b.env = append(b.env, fmt.Sprintf("RAIDQ_CLOCK_FAULT_N%d=true", i))
		}
		if err := os.MkdirAll(filepath.Join(dir, b.ids[i]), 0o755); err != nil {
			return nil, err
		}
	}
	if r.cfg.NoSync {
		r.plan.notes = append(r.plan.notes, "--no-fsync is not passed to containers: they fsync")
	}
	return b, nil
}

// buildDockerImage builds the image dc.Image from a context in
// dir/image: a static raidq binary (dc.Binary, the drill's own binary if
// static, or one built now) and the Dockerfile.
func buildDockerImage(r *run, dir string, dc DockerConfig) error {
	ctxDir := filepath.Join(dir, "image")
	if err := os.MkdirAll(ctxDir, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(ctxDir, "raidq")
	if dc.Binary == "" && r.cfg.Binary != "" && isStatic(r.cfg.Binary) {
		dc.Binary = r.cfg.Binary // the drill's own binary will do
	}
	if dc.Binary != "" {
		if !isStatic(dc.Binary) {
			return fmt.Errorf("docker: %s is not a static binary (the image is FROM scratch): build it with CGO_ENABLED=0", dc.Binary)
		}
		if err := copyFile(dc.Binary, bin, 0o755); err != nil {
			return err
		}
	} else {
		r.cfg.Logger.Info("drill: building a static raidq binary (CGO_ENABLED=0) for the image")
		if err := buildStatic(bin); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), dockerfile, 0o644); err != nil {
		return err
	}
	r.cfg.Logger.Info("drill: building the image", "tag", dc.Image)
	_, err := dockerRun(5*time.Minute, "docker", "build", "-q", "-t", dc.Image, ctxDir)
	return err
}

// isStatic says whether path is an ELF executable without a dynamic
// loader (it runs in a FROM scratch image).
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// buildStatic builds a CGO_ENABLED=0 raidq binary at out.
func buildStatic(out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("build a static raidq: no go command in PATH (give DockerConfig.Binary): %w", err)
	}
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/raidq/raidq/cmd/raidq")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build a static raidq: %w\n%s", err, b)
	}
	return nil
}

func dockerRun(timeout time.Duration, name string, args ...string) (string, error) {
	return dockerRunEnv(timeout, nil, name, args...)
}

func dockerRunEnv(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, short(strings.TrimSpace(errb.String()), 500))
	}
	return out.String(), nil
}

func (b *dockerBackend) composeRun(timeout time.Duration, args ...string) (string, error) {
	all := append(append([]string(nil), b.compose[1:]...), args...)
	return dockerRunEnv(timeout, b.env, b.compose[0], all...)
}

func (b *dockerBackend) Name() string    { return "docker" }
func (b *dockerBackend) Cluster() string { return "drill" }
func (b *dockerBackend) IDs() []string   { return b.ids }
func (b *dockerBackend) DataDir(i int) string {
	return filepath.Join(b.dir, b.ids[i])
}

// ClientBinary is the image's static binary (it runs here too).
func (b *dockerBackend) ClientBinary() string { return filepath.Join(b.dir, "image", "raidq") }

func (b *dockerBackend) network() string { return b.project + "_raidq" }

func (b *dockerBackend) Start(ctx context.Context) error {
	t0 := time.Now()
	if _, err := b.composeRun(3*time.Minute, "up", "-d", "--no-build"); err != nil {
		return err
	}
	for i, id := range b.ids {
		out, err := b.composeRun(time.Minute, "ps", "-q", id)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.containers[i], b.started[i] = strings.TrimSpace(out), t0
		b.mu.Unlock()
	}
	cctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	all := make([]int, len(b.ids))
	for i := range all {
		all[i] = i
	}
	if err := b.WaitUp(cctx, all...); err != nil {
		var tails strings.Builder
		for i := range b.ids {
			fmt.Fprintf(&tails, "--- %s:\n%s\n", b.ids[i], b.Tail(i, 10))
		}
		return fmt.Errorf("%w\n%s", err, tails.String())
	}
	return nil
}

func (b *dockerBackend) ClientURL(ns []int) string {
	if len(ns) == 0 {
		for i := range b.ids {
			ns = append(ns, i)
		}
	}
	var urls []string
	for _, i := range ns {
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(b.ports[i]))
	}
	return strings.Join(urls, ",")
}

func (b *dockerBackend) container(i int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.containers[i]
}

func (b *dockerBackend) ExpectExit(i int, ok bool) {
	b.mu.Lock()
	b.expected[i] = ok
	b.mu.Unlock()
}

func (b *dockerBackend) Kill(i int) error {
	b.ExpectExit(i, true)
	if b.Paused(i) {
		_ = b.Resume(i)
	}
	_, err := dockerRun(time.Minute, "docker", "kill", "-s", "KILL", b.container(i))
	return err
}

func (b *dockerBackend) Stop(i int) (int, error) {
	b.ExpectExit(i, true)
	if _, err := dockerRun(2*time.Minute, "docker", "stop", "-t", "40", b.container(i)); err != nil {
		return -1, err
	}
	out, err := dockerRun(time.Minute, "docker", "inspect", "-f", "{{.State.ExitCode}}", b.container(i))
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

func (b *dockerBackend) StartNode(i int) error {
	t0 := time.Now()
	if _, err := dockerRun(time.Minute, "docker", "start", b.container(i)); err != nil {
		return err
	}
	b.mu.Lock()
	b.started[i], b.expected[i], b.paused[i] = t0, false, false
	b.mu.Unlock()
	return nil
}

func (b *dockerBackend) WaitUp(ctx context.Context, ns ...int) error {
	for _, i := range ns {
		b.mu.Lock()
		since := b.started[i]
		b.mu.Unlock()
		if err := cluster.WaitMembers(ctx, b.ClientURL(b.upNodes()), "drill", []string{b.ids[i]}, since, nil); err != nil {
			return err
		}
	}
	return nil
}

// upNodes are the nodes a client can reach now (not isolated).
func (b *dockerBackend) upNodes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ns []int
	for i := range b.ids {
		cut := false
		for _, j := range b.isolated {
			cut = cut || i == j
		}
		if !cut && !b.paused[i] {
			ns = append(ns, i)
		}
	}
	return ns
}

func (b *dockerBackend) WaitUpOrExit(ctx context.Context, i int) (bool, error) {
	b.mu.Lock()
	since := b.started[i]
	b.mu.Unlock()
	var exitErr error
	check := func() error {
		if !b.Running(i) {
			exitErr = fmt.Errorf("%s exited: %s", b.ids[i], lastLine(b.Tail(i, 20)))
			return exitErr
		}
		return nil
	}
	err := cluster.WaitMembers(ctx, b.ClientURL(b.upNodes()), "drill", []string{b.ids[i]}, since, check)
	if exitErr != nil {
		return true, exitErr
	}
	return false, err
}

func (b *dockerBackend) Pause(i int) error {
	if _, err := dockerRun(time.Minute, "docker", "pause", b.container(i)); err != nil {
		return err
	}
	b.mu.Lock()
	b.paused[i] = true
	b.mu.Unlock()
	return nil
}

func (b *dockerBackend) Resume(i int) error {
	b.mu.Lock()
	was := b.paused[i]
	b.paused[i] = false
	b.mu.Unlock()
	if !was {
		return nil
	}
	_, err := dockerRun(time.Minute, "docker", "unpause", b.container(i))
	return err
}

func (b *dockerBackend) Paused(i int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paused[i]
}

func (b *dockerBackend) Running(i int) bool {
	out, err := dockerRun(time.Minute, "docker", "inspect", "-f", "{{.State.Running}}", b.container(i))
	return err == nil && strings.TrimSpace(out) == "true"
}

func (b *dockerBackend) Isolation() string {
	return "docker network disconnect"
}

func (b *dockerBackend) Isolate(ns []int) error {
	var errs []error
	for _, i := range ns {
		if _, err := dockerRun(time.Minute, "docker", "network", "disconnect", b.network(), b.container(i)); err != nil {
			errs = append(errs, err)
			continue
		}
		b.mu.Lock()
		b.isolated = append(b.isolated, i)
		b.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (b *dockerBackend) HealNet() error {
	b.mu.Lock()
	iso := b.isolated
	b.isolated = nil
	b.mu.Unlock()
	var errs []error
	for _, i := range iso {
		if _, err := dockerRun(time.Minute, "docker", "network", "connect", "--alias", b.ids[i], b.network(), b.container(i)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PollExits inspects the containers at most once a second.
func (b *dockerBackend) PollExits() []exitInfo {
	b.mu.Lock()
	if time.Since(b.lastPoll) < time.Second {
		b.mu.Unlock()
		return nil
	}
	b.lastPoll = time.Now()
	cs := append([]string(nil), b.containers...)
	b.mu.Unlock()
	out, err := dockerRun(time.Minute, "docker", append([]string{"inspect", "-f",
		"{{.State.Running}} {{.State.ExitCode}} {{.State.StartedAt}}"}, cs...)...)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var exits []exitInfo
	for i, l := range lines {
		f := strings.Fields(l)
		if i >= len(cs) || len(f) != 3 || f[0] == "true" {
			continue
		}
		b.mu.Lock()
		skip := b.expected[i] || b.reported[i] == f[2]
		if !skip {
			b.reported[i] = f[2]
		}
		b.mu.Unlock()
		if skip {
			continue
		}
		code, _ := strconv.Atoi(f[1])
		exits = append(exits, exitInfo{node: i, code: code, tail: b.Tail(i, 20)})
	}
	return exits
}

func (b *dockerBackend) Tail(i, lines int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, "docker", "logs", "--tail", strconv.Itoa(lines), b.container(i)).CombinedOutput()
	return string(out)
}

func (b *dockerBackend) StopAll() {
	var wg sync.WaitGroup
	for i := range b.ids {
		b.ExpectExit(i, true)
		_ = b.Resume(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = dockerRun(2*time.Minute, "docker", "stop", "-t", "40", b.container(i))
		}()
	}
	wg.Wait()
}

func (b *dockerBackend) Close() {
	for i := range b.ids {
		b.ExpectExit(i, true)
		_ = b.Resume(i)
	}
	if _, err := b.composeRun(3*time.Minute, "down", "-t", "5", "--remove-orphans"); err != nil {
		b.r.cfg.Logger.Warn("drill: docker compose down failed", "err", err)
	}
}
