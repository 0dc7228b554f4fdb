//go:build !linux

package drill

import "os/exec"

// setMemberProcAttr does nothing here: only Linux has a parent-death signal.
func setMemberProcAttr(*exec.Cmd) {}
