//go:build !linux

package health

import "os/exec"

// setProcessGroup leaves exec's default, killing only the process: lvsd
// runs on Linux; this keeps the package building elsewhere for development.
func setProcessGroup(*exec.Cmd, *ExecUser) {}
