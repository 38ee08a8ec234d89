package health

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// execChecker runs a program; exit status 0 passes.
type execChecker struct {
	argv []string
	env  []string
	user *ExecUser
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
	return &execChecker{argv: c.Command, env: env, user: c.ExecUser}, nil
}

// execEnv is what a check program inherits of the agent's environment:
// PATH (a fixed one if the agent has none), the locale and the time zone.
// Nothing else: under systemd the agent's environment holds NOTIFY_SOCKET,
// the credentials directory, the journal stream, and whatever an operator
// put there for lvsd alone. A program run as another user gets that
// user's HOME, USER and LOGNAME.
func execEnv(agent []string, u *ExecUser) []string {
	var env []string
	path := "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range agent {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "PATH":
			path = kv
		case name == "LANG" || name == "TZ" || strings.HasPrefix(name, "LC_"):
			env = append(env, kv)
		case u == nil && (name == "HOME" || name == "USER" || name == "LOGNAME"):
			env = append(env, kv)
		}
	}
	env = append(env, path)
	if u != nil {
		env = append(env, "HOME="+u.Home, "USER="+u.Name, "LOGNAME="+u.Name)
	}
	return env
}

func (c *execChecker) Check(ctx context.Context) Result {
	cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
	cmd.Env = c.env
	out := &capWriter{max: maxOutputBytes}
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group, killed as a whole at the timeout: a script's
	// children (curl, sleep ...) must not outlive the check. WaitDelay
	// bounds the wait for output pipes held open by anything that escaped
	// the group.
	setProcessGroup(cmd, c.user)
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err == nil {
		return Result{OK: true}
	}
	if ctx.Err() != nil {
		return failed("exec: timed out, process group killed" + out.tail())
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return failed(fmt.Sprintf("exec: %s%s", exit.ProcessState, out.tail()))
	}
	if c.user != nil && errors.Is(err, syscall.EPERM) {
		// Running a check as another user needs CAP_SETUID and CAP_SETGID,
		// which the packaged unit leaves out unless asked.
		return failed("exec: " + err.Error() + " (running as user " + c.user.Name +
			" needs CAP_SETUID and CAP_SETGID: systemctl edit lvsd, docs/operations.md)")
	}
	return failed("exec: " + err.Error())
}

// capWriter keeps the first max bytes written to it, for the reason of a
// failing check; stdout and stderr share one.
type capWriter struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// tail is ": <output>" on one line, or "" when there was none.
func (w *capWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.Join(strings.Fields(w.buf.String()), " ")
	if s == "" {
		return ""
	}
	return ": " + strconv.Quote(s)
}
