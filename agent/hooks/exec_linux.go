package hooks

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts cmd as the leader of a new process group and makes
// cancellation kill the whole group. No Pdeathsig: it fires when the
// forking OS thread exits, which Go does when a goroutine that locked its
// thread ends (netns work elsewhere in lvsd).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
