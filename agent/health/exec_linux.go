package health

import (
	"os/exec"
	"syscall"

	"github.com/lvsd/lvsd/agent/program"
)

// setProcessGroup starts cmd as the leader of a process group killed as a
// whole on cancellation (program.KillGroupOnCancel); with u, as that user,
// its group and its supplementary groups (lvsd needs CAP_SETUID and
// CAP_SETGID for it).
func setProcessGroup(cmd *exec.Cmd, u *ExecUser) {
	program.KillGroupOnCancel(cmd)
	if u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
		cmd.Dir = "/"
	}
}
