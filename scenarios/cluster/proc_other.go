//go:build !linux

package cluster

import "os/exec"

// setDeathSignal: only Linux has a parent-death signal; elsewhere a child
// outlives a test that crashes before its cleanup.
func setDeathSignal(*exec.Cmd) {}
