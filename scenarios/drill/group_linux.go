package drill

import (
	"os/exec"
	"syscall"
)

// setMemberProcAttr makes the kernel kill a group member when the drill
// dies (like the node processes, scenarios/cluster).
func setMemberProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
