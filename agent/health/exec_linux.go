package health

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts cmd as the leader of a new process group and makes
// cancellation kill the whole group; with u, as that user, its group and
// its supplementary groups (lvsd needs CAP_SETUID and CAP_SETGID for it).
// No Pdeathsig: it fires when the forking OS thread exits, which Go does
// whenever a goroutine that locked its thread (netns work elsewhere in the
// agent) ends, and would kill healthy checks.
func setProcessGroup(cmd *exec.Cmd, u *ExecUser) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
		cmd.Dir = "/"
	}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
