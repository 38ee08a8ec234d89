package program

import (
	"os/exec"
	"syscall"
)

// KillGroupOnCancel starts cmd as the leader of a new process group and
// makes cancellation kill the whole group: a script's children (sleep,
// curl ...) must not outlive it. No Pdeathsig: it fires when the forking
// OS thread exits, which Go does whenever a goroutine that locked its
// thread (netns work elsewhere in lvsd) ends, and would kill healthy runs.
func KillGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
