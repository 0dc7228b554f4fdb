package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles the raidq binary (package github.com/raidq/raidq/cmd/raidq)
// into dir and returns its path. It runs the go command of the toolchain
// running the caller, so the build cache makes repeated builds a link.
func Build(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build raidq: no go command in PATH: %w", err)
	}
	out := filepath.Join(dir, "raidq")
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/raidq/raidq/cmd/raidq")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build raidq: %w\n%s", err, stderr.String())
	}
	return out, nil
}

// BuildBinary is Build into tb.TempDir(); it fails the test on error.
func BuildBinary(tb TB) string {
	tb.Helper()
	bin, err := Build(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago (all held open together, so they differ). Another process
// may still take one before it is used; that is rare and shows as a bind
// error naming the port.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort is FreePorts(1)[0].
func FreePort() (int, error) {
	p, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// Proc is a child process whose stdout and stderr are captured (the last
// MaxOutput bytes of each). On Linux it is killed if the process that
// started it dies (so a crashed or timed-out test leaves nothing behind).
type Proc struct {
	Name string
	Cmd  *exec.Cmd

	stdout, stderr *tailBuffer
	done           chan struct{}
	err            error // Wait's error, set before done closes
}

// MaxOutput is how much of each output stream a Proc keeps.
const MaxOutput = 4 << 20

// StartProc starts bin with args; env entries are added to the caller's
// environment.
func StartProc(name, bin string, args []string, env ...string) (*Proc, error) {
	return startProc(name, bin, args, env, nil)
}

// startProc is StartProc with a hook that adjusts the command last.
func startProc(name, bin string, args, env []string, prepare func(*exec.Cmd)) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &Proc{Name: name, Cmd: cmd, stdout: newTail(), stderr: newTail(), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	setDeathSignal(cmd)
	if prepare != nil {
		prepare(cmd)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Check returns an error (with the tail of stderr) once the process has
// exited: the check argument of WaitMembers for a process that must stay up.
func (p *Proc) Check() error {
	if !p.Exited() {
		return nil
	}
	return fmt.Errorf("%s exited (code %d):\n%s", p.Name, p.ExitCode(), p.Tail(15))
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit status once exited: -1 while running or when the
// process was ended by a signal.
func (p *Proc) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Signal sends sig to a running process (no-op once it exited).
func (p *Proc) Signal(sig os.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := p.Cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.Name, err)
	}
	return nil
}

// Wait waits up to timeout for the process to exit and returns its exit
// code (-1 if ended by a signal). It is an error if it is still running.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.ExitCode(), nil
	case <-t.C:
		return -1, fmt.Errorf("%s still running after %s", p.Name, timeout)
	}
}

// Stop sends SIGTERM and waits up to timeout for the exit code; on
// timeout it kills the process and returns an error.
func (p *Proc) Stop(timeout time.Duration) (int, error) {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return -1, err
	}
	code, err := p.Wait(timeout)
	if err != nil {
		p.Kill()
		return -1, fmt.Errorf("%w after SIGTERM (killed)", err)
	}
	return code, nil
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stdout and Stderr return what the process wrote (the last MaxOutput bytes).
func (p *Proc) Stdout() string { return p.stdout.String() }

// Stderr returns what the process wrote to stderr (the last MaxOutput bytes).
func (p *Proc) Stderr() string { return p.stderr.String() }

// WaitStderr waits until stderr contains substr, the process exits, or
// timeout passes.
func (p *Proc) WaitStderr(substr string, timeout time.Duration) error {
	return p.stderr.waitFor(substr, timeout, p.done, p.Name)
}

// WaitStdout is WaitStderr on stdout.
func (p *Proc) WaitStdout(substr string, timeout time.Duration) error {
	return p.stdout.waitFor(substr, timeout, p.done, p.Name)
}

// Tail returns the last n lines of stderr.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Stderr(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailBuffer keeps the last MaxOutput bytes written and wakes waiters.
type tailBuffer struct {
	mu      sync.Mutex
	buf     []byte
	changed chan struct{} // closed and replaced on every write
}

func newTail() *tailBuffer { return &tailBuffer{changed: make(chan struct{})} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - MaxOutput; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func (b *tailBuffer) waitFor(substr string, timeout time.Duration, done <-chan struct{}, name string) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		b.mu.Lock()
		found, ch := bytes.Contains(b.buf, []byte(substr)), b.changed
		b.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-ch:
		case <-done:
			if strings.Contains(b.String(), substr) {
				return nil
			}
			return fmt.Errorf("%s exited before writing %q", name, substr)
		case <-t.C:
			return fmt.Errorf("%s did not write %q within %s", name, substr, timeout)
		}
	}
}

// TB is the part of testing.TB that the test helpers here use. Naming
// it instead of importing package testing keeps testing (and its flags)
// out of the raidq binary, which runs drills on this package.
type TB interface {
	Helper()
	Fatal(args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
	TempDir() string
}
