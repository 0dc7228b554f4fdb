package cluster

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child when its parent dies.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
