package hooks

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
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
func run(ctx context.Context, path string, strict bool, env []string, timeout time.Duration) (Result, string) {
	// Opened and checked once per run, and the file checked is the file
	// run: the program may have been replaced since the configuration was
	// loaded.
	prog, err := program.Open(path, strict)
	if err != nil {
		return Result{Error, err}, ""
	}
	defer prog.Close()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := prog.Command(ctx)
	cmd.Env = env
	cmd.Dir = "/"
	out := &program.Output{Max: maxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	// WaitDelay bounds the wait for pipes held open by anything that left
	// the process group.
	program.KillGroupOnCancel(cmd)
	cmd.WaitDelay = time.Second
	err = cmd.Run()
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
