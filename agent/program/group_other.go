//go:build !linux

package program

import "os/exec"

// KillGroupOnCancel leaves exec's default, killing only the process: lvsd
// runs on Linux; this keeps the package building elsewhere.
func KillGroupOnCancel(*exec.Cmd) {}
