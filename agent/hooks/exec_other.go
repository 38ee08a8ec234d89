//go:build !linux

package hooks

import "os/exec"

// setProcessGroup leaves exec's default, killing only the process: lvsd
// runs on Linux; this keeps the package building elsewhere.
func setProcessGroup(*exec.Cmd) {}
