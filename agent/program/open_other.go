//go:build !linux

package program

import (
	"context"
	"os"
	"os/exec"
)

// openProgram opens path to check it. lvsd runs on Linux; elsewhere the
// program is run by path after the check (not race-free), to keep the
// package building for development.
func openProgram(path string) (*os.File, error) { return os.Open(path) }

func realPath(_ *os.File, path string) string { return path }

func (p *Program) command(ctx context.Context, args []string) *exec.Cmd {
	return exec.CommandContext(ctx, p.Path, args...)
}
