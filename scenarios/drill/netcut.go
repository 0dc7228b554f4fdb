package drill

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// netCut cuts node processes off the network with iptables (root only).
//
// A node that may be isolated runs under a uid of its own. While it is cut
// off, every connection it owns (uid match) or that reaches its ports gets
// a conntrack mark, and every packet of a marked connection is dropped in
// OUTPUT: on loopback each packet passes its sender's OUTPUT chain, so the
// cut holds both ways, for the connections it made and those made to it.
// The rules live in two chains named after this process (RQDRILL-F-<pid>
// in filter, RQDRILL-M-<pid> in mangle), jumped to from OUTPUT; close
// removes them, and a later drill removes chains left by a drill that died.
type netCut struct {
	bin    string // a copy of the binary the node uids can run
	filter string
	mangle string
	mark   string

	mu     sync.Mutex
	active bool
}

const uidBase = 3_100_000 // far above any system or user uid

// setupNetCut prepares iptables isolation for the plan's isolated nodes,
// or says why it cannot.
func (b *procBackend) setupNetCut(bin string) error {
	if err := netCutPossible(); err != nil {
		return err
	}
	// The isolated nodes run under their own uid: they must reach the
	// binary and their data directory.
	for p := filepath.Dir(absPath(b.dir)); p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the data directory's parent %s is not searchable by other users (the isolated nodes run under their own uid)", p)
		}
	}
	if err := os.Chmod(b.dir, 0o755); err != nil {
		return err
	}
	nb := filepath.Join(b.dir, "bin", "raidq")
	if err := copyFile(bin, nb, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Dir(nb), 0o755); err != nil {
		return err
	}
	pid := os.Getpid()
	n := &netCut{bin: nb, filter: fmt.Sprintf("RQDRILL-F-%d", pid), mangle: fmt.Sprintf("RQDRILL-M-%d", pid),
		mark: fmt.Sprintf("0x%x", 0x52510000|(pid&0xffff))}
	removeStaleChains()
	if err := n.create(); err != nil {
		_ = n.close()
		return fmt.Errorf("iptables: %w", err)
	}
	b.net = n
	b.uids = make(map[int]uint32)
	for _, i := range b.r.plan.isolate {
		b.uids[i] = uint32(uidBase + (pid%1000)*10 + i)
	}
	return nil
}

// prepareNetDirs gives each isolated node's data directory to its uid.
func (b *procBackend) prepareNetDirs() error {
	for i, uid := range b.uids {
		d := b.c.Node(i).Dir
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Chown(d, int(uid), int(uid)); err != nil {
			return err
		}
	}
	return nil
}

// netCutPossible says why iptables isolation cannot work here (nil: it
// may: Linux, root, an iptables command).
func netCutPossible() error {
	if runtime.GOOS != "linux" {
		return errors.New("iptables isolation is Linux-only")
	}
	if os.Geteuid() != 0 {
		return errors.New("iptables isolation needs root")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return errors.New("no iptables command")
	}
	return nil
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func copyFile(src, dst string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

func ipt(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (n *netCut) create() error {
	if err := ipt("-t", "mangle", "-N", n.mangle); err != nil {
		return err
	}
	if err := ipt("-t", "mangle", "-I", "OUTPUT", "1", "-j", n.mangle); err != nil {
		return err
	}
	if err := ipt("-N", n.filter); err != nil {
		return err
	}
	return ipt("-I", "OUTPUT", "1", "-j", n.filter)
}

// cut isolates the processes of uids and the ports.
func (n *netCut) cut(uids []uint32, ports []int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, u := range uids {
		if err := ipt("-t", "mangle", "-A", n.mangle, "-m", "owner", "--uid-owner", strconv.Itoa(int(u)),
			"-j", "CONNMARK", "--set-mark", n.mark); err != nil {
			return err
		}
	}
	for _, p := range ports {
		for _, dir := range []string{"--dport", "--sport"} {
			if err := ipt("-t", "mangle", "-A", n.mangle, "-p", "tcp", dir, strconv.Itoa(p),
				"-j", "CONNMARK", "--set-mark", n.mark); err != nil {
				return err
			}
		}
	}
	n.active = true
	return ipt("-A", n.filter, "-m", "connmark", "--mark", n.mark, "-j", "DROP")
}

// heal lifts the cut (the marks stay on the connections; nothing drops them).
func (n *netCut) heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.active {
		return nil
	}
	n.active = false
	return errors.Join(ipt("-F", n.filter), ipt("-t", "mangle", "-F", n.mangle))
}

// close removes the chains.
func (n *netCut) close() error {
	return removeChains(n.filter, n.mangle)
}

func removeChains(filter, mangle string) error {
	var errs []error
	for ipt("-D", "OUTPUT", "-j", filter) == nil {
	}
	for ipt("-t", "mangle", "-D", "OUTPUT", "-j", mangle) == nil {
	}
	_ = ipt("-F", filter)
	_ = ipt("-t", "mangle", "-F", mangle)
	if err := ipt("-X", filter); err != nil && !strings.Contains(err.Error(), "No chain") {
		errs = append(errs, err)
	}
	if err := ipt("-t", "mangle", "-X", mangle); err != nil && !strings.Contains(err.Error(), "No chain") {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeStaleChains removes the chains of drills whose process is gone.
func removeStaleChains() {
	out, err := exec.Command("iptables", "-w", "5", "-S").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[0] != "-N" || !strings.HasPrefix(f[1], "RQDRILL-F-") {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(f[1], "RQDRILL-F-"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // that drill still runs
		}
		_ = removeChains(f[1], fmt.Sprintf("RQDRILL-M-%d", pid))
	}
}
