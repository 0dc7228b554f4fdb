package bench

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// procSample is what /proc says about one process at one moment.
type procSample struct {
	CPU   time.Duration // user + system time so far
	HWMKB int64         // peak resident set (VmHWM), KiB
	OK    bool          // false: /proc could not be read (not Linux, or gone)
}

// readProc samples /proc/<pid>/stat and /proc/<pid>/status.
func readProc(pid int) procSample {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}
	}
	// The command name (field 2) is in parentheses and may contain
	// spaces; the fields after the last ')' start at field 3 (state).
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procSample{}
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return procSample{}
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	s := procSample{CPU: time.Duration(utime+stime) * time.Second / clockTicks, OK: true}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
				s.HWMKB, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return s
}

// ProcStat is one process's resource use during a workload.
type ProcStat struct {
	Name      string  `json:"name"`
	PID       int     `json:"pid"`
	CPUS      float64 `json:"cpu_s"`       // CPU seconds used during the workload
	PeakRSSMB float64 `json:"peak_rss_mb"` // VmHWM at the end (or just before it was killed)
	Killed    bool    `json:"killed,omitempty"`
}

// tracked follows one process through a workload.
type tracked struct {
	name   string
	pid    int
	start  procSample
	end    procSample
	ended  bool
	killed bool
}

func (t *tracked) begin() { t.start = readProc(t.pid) }

// finish takes the end sample (once: a killed process is sampled just
// before the kill).
func (t *tracked) finish() {
	if !t.ended {
		t.end, t.ended = readProc(t.pid), true
	}
}

func (t *tracked) stat() ProcStat {
	s := ProcStat{Name: t.name, PID: t.pid, Killed: t.killed}
	if t.start.OK && t.end.OK {
		s.CPUS = (t.end.CPU - t.start.CPU).Seconds()
	}
	s.PeakRSSMB = float64(t.end.HWMKB) / 1024
	return s
}

// diskUsage is what du reports for dir: the blocks allocated to every
// regular file under it, in bytes.
func diskUsage(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += int64(st.Blocks) * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	return total
}

// machineBusy is the CPU time the whole machine spent busy so far (all
// CPUs: /proc/stat user+nice+system+irq+softirq+steal); ok is false where
// /proc/stat cannot be read.
func machineBusy() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, false
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, true
}
