package health

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/agent/program"
)

// execChecker runs a program; exit status 0 passes.
type execChecker struct {
	argv   []string
	env    []string
	user   *ExecUser
	strict bool // check the program's owner and mode before each run
}

func newExecChecker(t *Target, dst netip.AddrPort, c *Check) (*execChecker, error) {
	if len(c.Command) == 0 || c.Command[0] == "" {
		return nil, errors.New("no command")
	}
	// The environment is taken once per target, not per run: it does not
	// change under a running agent, and copying it 1,000 times a second
	// would be waste.
	env := append(execEnv(os.Environ(), c.ExecUser),
		"LVSD_TARGET_ADDR="+dst.Addr().String(),
		"LVSD_TARGET_PORT="+strconv.Itoa(int(dst.Port())),
		"LVSD_TARGET_KEY="+t.Key)
	return &execChecker{argv: c.Command, env: env, user: c.ExecUser, strict: !c.LaxModes}, nil
}

// execEnv is what a check program inherits of the agent's environment
// (program.Env); a program run as another user gets that user's HOME, USER
// and LOGNAME.
func execEnv(agent []string, u *ExecUser) []string {
	env := program.Env(agent, u == nil)
	if u != nil {
		env = append(env, "HOME="+u.Home, "USER="+u.Name, "LOGNAME="+u.Name)
	}
	return env
}

func (c *execChecker) Check(ctx context.Context) Result {
	path := c.argv[0]
	if !filepath.IsAbs(path) {
		// A bare name is looked up in lvsd's PATH, as a shell would.
		found, err := exec.LookPath(path)
		if err != nil {
			return failed("exec: " + err.Error())
		}
		if path, err = filepath.Abs(found); err != nil {
			return failed("exec: " + err.Error())
		}
	}
	// The file checked is the file run, even if the path is made to name
	// another meanwhile.
	prog, err := program.Open(path, c.strict)
	if err != nil {
		return failed("exec: " + err.Error())
	}
	defer prog.Close()
	cmd := prog.Command(ctx, c.argv[1:]...)
	cmd.Args[0] = c.argv[0]
	cmd.Env = c.env
	out := &program.Output{Max: maxOutputBytes}
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group, killed as a whole at the timeout: a script's
	// children (curl, sleep ...) must not outlive the check. WaitDelay
	// bounds the wait for output pipes held open by anything that escaped
	// the group.
	setProcessGroup(cmd, c.user)
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if err == nil {
		return Result{OK: true}
	}
	if ctx.Err() != nil {
		return failed("exec: timed out, process group killed" + tail(out))
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return failed(fmt.Sprintf("exec: %s%s", exit.ProcessState, tail(out)))
	}
	if c.user != nil && errors.Is(err, syscall.EPERM) {
		// Running a check as another user needs CAP_SETUID and CAP_SETGID,
		// which the packaged unit leaves out unless asked.
		return failed("exec: " + err.Error() + " (running as user " + c.user.Name +
			" needs CAP_SETUID and CAP_SETGID: systemctl edit lvsd, docs/operations.md)")
	}
	return failed("exec: " + err.Error())
}

// tail is ": <output>" on one line, or "" when there was none.
func tail(out *program.Output) string {
	if s := out.Line(); s != "" {
		return ": " + strconv.Quote(s)
	}
	return ""
}
