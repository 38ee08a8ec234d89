package topo

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Exec returns a command that runs name inside the host's namespace through
// `ip netns exec`, which also remounts /sys for the namespace (so tools
// reading /sys/class/net see the host's links). It costs one extra exec of
// ip; Start avoids that. For a nil Host the command runs as is.
func (h *Host) Exec(ctx context.Context, name string, args ...string) *exec.Cmd {
	if h == nil {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Start starts cmd (e.g. from exec.CommandContext) inside the host's network
// namespace without a wrapper process: the child is forked from a thread
// switched into the namespace and inherits it. Unlike Exec, /sys still
// shows the original namespace. Wait for cmd as usual.
func (h *Host) Start(cmd *exec.Cmd) error {
	return h.Do(cmd.Start)
}

// Run runs name inside the host's namespace (via Start) and returns its
// combined output. The error includes the output.
func (h *Host) Run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := h.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return out.String(), fmt.Errorf("%v: %s %s: %w: %s", h, name, strings.Join(args, " "),
			err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
