package hooks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/agent/program"
)

// Outcome is how a run ended (the result label of lvsd_hook_runs_total).
type Outcome int

// Outcomes.
const (
	OK      Outcome = iota // exit status 0
	Failed                 // another exit status, or killed by a signal
	Timeout                // outlived the timeout: its process group was killed
	Error                  // could not be started (missing, not executable, refused)
	numResults
)

func (o Outcome) String() string {
	return [...]string{"ok", "failed", "timeout", "error"}[o]
}

// Result is the outcome of one run.
type Result struct {
	Outcome Outcome
	Err     error // nil when OK
}

// maxOutput bounds what is kept (and logged) of a run's stdout and stderr.
const maxOutput = 4096

// run runs the program at path with env, no arguments and no stdin,
// killing its process group after timeout; it returns the outcome and the
// start of the output on one line.
func run(ctx context.Context, path string, env []string, timeout time.Duration) (Result, string) {
	if err := CheckProgram(path); err != nil {
		return Result{Error, err}, ""
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = env
	cmd.Dir = "/"
	out := &program.Output{Max: maxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	// WaitDelay bounds the wait for pipes held open by anything that left
	// the process group.
	program.KillGroupOnCancel(cmd)
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return Result{OK, nil}, out.Line()
	case parent.Err() != nil:
		// Not the hook's fault: lvsd is stopping.
		return Result{Failed, errors.New("killed: lvsd is stopping")}, out.Line()
	case ctx.Err() != nil:
		return Result{Timeout, fmt.Errorf("killed after %s", timeout)}, out.Line()
	case errors.As(err, &exit):
		return Result{Failed, errors.New(exit.ProcessState.String())}, out.Line()
	default:
		return Result{Error, err}, out.Line()
	}
}

// CheckProgram reports why path may not be run as a hook: lvsd runs as
// root, so the program must be an absolute path to an executable regular
// file that only root (or the account lvsd runs as) can change — not
// writable by its group or others, and not in a directory others can
// write to.
func CheckProgram(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%q is not an absolute path", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s: %v", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable (mode %04o): chmod 755", path, fi.Mode().Perm())
	}
	if err := safeOwner(path, fi); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %v", dir, err)
	}
	// A directory others may write to lets them swap the file, unless it
	// is sticky (/tmp), where only the file's owner may.
	if di.Mode().Perm()&0o002 != 0 && di.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("%s is in %s, which others may write to (mode %04o)", path, dir, di.Mode().Perm())
	}
	return nil
}

// safeOwner refuses a file its group or others may write, or owned by
// another account than root and the one lvsd runs as.
func safeOwner(path string, fi fs.FileInfo) error {
	mode := fi.Mode().Perm()
	if mode&0o022 != 0 {
		return fmt.Errorf("%s is writable by its group or others (mode %04o): chmod go-w", path, mode)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d: it must belong to root or to the account lvsd runs as", path, st.Uid)
	}
	return nil
}
