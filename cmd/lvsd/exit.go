package main

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/lvsd/lvsd/agent/api"
)

// Exit codes, as LSB init scripts' status action uses them: scripts and
// monitoring tell a wrong command line and a stopped agent from a failure.
const (
	exitFailure    = 1 // the command failed
	exitUsage      = 2 // wrong command line: unknown command, flag or arguments
	exitPending    = 2 // lvsd plan --detailed-exitcode: changes pending (terraform's convention)
	exitNotRunning = 3 // no agent answers on the local socket
)

// usageError is a wrong command line (exit 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// errChangesPending is lvsd plan --detailed-exitcode finding changes to
// make: exit 2, and nothing more to say than the plan printed.
var errChangesPending = errors.New("changes pending")

// usagef is a usageError with a message.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCode maps run's error to the process's exit status.
func exitCode(err error) int {
	var u usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp), errors.As(err, &u):
		return exitUsage
	case errors.Is(err, errChangesPending):
		return exitPending
	case errors.Is(err, api.ErrNotRunning):
		return exitNotRunning
	}
	return exitFailure
}

// commit is set by the build (make: -X main.commit=...); without it the
// Go toolchain's VCS stamp is used, when the build had one.
var commit string

// versionLine is what lvsd --version prints: the version, the commit the
// binary was built from (with "-dirty" for uncommitted changes) and Go's.
func versionLine() string {
	c, dirty := commit, ""
	if info, ok := debug.ReadBuildInfo(); ok && c == "" {
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				c = s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "-dirty"
			}
		}
	}
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("lvsd %s (commit %s%s, %s %s/%s)", version, c, dirty, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
