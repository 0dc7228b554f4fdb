package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
)

// startProfile writes a CPU profile of this process to
// $RAIDQ_CPUPROFILE/<command>-<pid>.pprof when that variable names a
// directory (`raidq bench --cpuprofile` sets it for the processes it
// starts). The returned function stops it; a process killed with SIGKILL
// leaves no profile.
func startProfile() func() {
	dir := os.Getenv("RAIDQ_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	name := "raidq"
	if len(os.Args) > 1 {
		name = filepath.Base(os.Args[1])
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, os.Getpid())))
	if err != nil {
		fmt.Fprintln(os.Stderr, "raidq: RAIDQ_CPUPROFILE:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "raidq: RAIDQ_CPUPROFILE:", err)
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
