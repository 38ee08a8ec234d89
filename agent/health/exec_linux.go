package health

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts cmd as the leader of a new process group and makes
// cancellation kill the whole group. No Pdeathsig: it fires when the forking
// OS thread exits, which Go does whenever a goroutine that locked its thread
// (netns work elsewhere in the agent) ends, and would kill healthy checks.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
