package health

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func writeScript(t *testing.T, body string) string {
	path := filepath.Join(t.TempDir(), "check.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExec(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		args   []string
		ok     bool
		reason string
	}{
		{"exit 0", "exit 0\n", nil, true, ""},
		{"exit 3 with output", "echo 'backend   is\n down' >&2\nexit 3\n", nil, false, `exec: exit status 3: "backend is down"`},
		{"environment", `[ "$LVSD_TARGET_ADDR" = 127.0.0.1 ] && [ "$LVSD_TARGET_PORT" = 8080 ] && [ "$LVSD_TARGET_KEY" = t/127.0.0.1:8080 ]` + "\n", nil, true, ""},
		{"arguments without a shell", `[ "$1" = 'a b' ] && [ "$2" = '$HOME' ]` + "\n", []string{"a b", "$HOME"}, true, ""},
		{"long output capped", "yes x | head -c 100000\nexit 1\n", nil, false, "exit status 1"},
	}
	for _, tt := range tests {
		res, _ := probe(t, "127.0.0.1:8080", Check{Type: "exec", Command: append([]string{writeScript(t, tt.body)}, tt.args...), LaxModes: true})
		if res.OK != tt.ok || !strings.Contains(res.Reason, tt.reason) {
			t.Errorf("%s: got %v %q, want %v %q", tt.name, res.OK, res.Reason, tt.ok, tt.reason)
		}
		if len(res.Reason) > maxOutputBytes+64 {
			t.Errorf("%s: reason of %d bytes", tt.name, len(res.Reason))
		}
	}
	res, _ := probe(t, "127.0.0.1:8080", Check{Type: "exec", Command: []string{"/nonexistent/check"}})
	wantResult(t, res, false, "exec: ")
	res, _ = probe(t, "127.0.0.1:8080", Check{Type: "exec"})
	wantResult(t, res, false, "invalid check: no command")
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The script starts a grandchild that would outlive it, then hangs.
	path := writeScript(t, "sleep 60 &\necho $! > "+pidFile+"\nsleep 60\n")
	// On a loaded host the script may not have started its grandchild when
	// the timeout strikes: then try with a longer one.
	var b []byte
	for timeout := 300 * time.Millisecond; ; timeout *= 2 {
		res, _ := probe(t, "127.0.0.1:8080", Check{Type: "exec", Command: []string{path}, Timeout: timeout, LaxModes: true})
		wantResult(t, res, false, "exec: timed out, process group killed")
		var err error
		if b, err = os.ReadFile(pidFile); err == nil && len(b) > 0 {
			break
		}
		if timeout > 10*time.Second {
			t.Fatalf("the script never started its grandchild: %v", err)
		}
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, "the grandchild to die", func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		// Gone, or a zombie waiting for init to reap it.
		return err != nil || strings.Contains(string(stat), ") Z ")
	})
}

// A check program sees PATH, the locale and lvsd's target variables, not
// the rest of the agent's environment (NOTIFY_SOCKET under systemd, an
// operator's secrets).
func TestExecFilteredEnvironment(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "/run/systemd/notify")
	t.Setenv("LVSD_TEST_SECRET", "hunter2")
	t.Setenv("LANG", "C.UTF-8")
	body := `[ -z "$NOTIFY_SOCKET" ] && [ -z "$LVSD_TEST_SECRET" ] && [ "$LANG" = C.UTF-8 ] && [ -n "$PATH" ] && [ "$LVSD_TARGET_PORT" = 8080 ]` + "\n"
	res, _ := probe(t, "127.0.0.1:8080", Check{Type: "exec", Command: []string{writeScript(t, body)}, LaxModes: true})
	wantResult(t, res, true, "")
	got := execEnv([]string{"PATH=/bin", "HOME=/root", "USER=root", "SECRET=x", "LC_ALL=C", "TZ=UTC"}, &ExecUser{Name: "nobody", Home: "/nonexistent"})
	want := []string{"LC_ALL=C", "TZ=UTC", "PATH=/bin", "HOME=/nonexistent", "USER=nobody", "LOGNAME=nobody"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("execEnv = %q, want %q", got, want)
	}
}

// With a user, the program runs with that uid, gid and groups.
func TestExecAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a program as another user needs root")
	}
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "check.sh")
	body := "#!/bin/sh\n[ \"$(id -u)\" = 65534 ] && [ \"$(id -g)\" = 65533 ] && [ \"$USER\" = nobody ] && [ \"$(pwd)\" = / ]\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	u := &ExecUser{Name: "nobody", UID: 65534, GID: 65533, Home: "/nonexistent"}
	res, _ := probe(t, "127.0.0.1:8080", Check{Type: "exec", Command: []string{script}, ExecUser: u, LaxModes: true})
	wantResult(t, res, true, "")
}

// Without LaxModes a program others may replace is not run: one under
// /tmp (writable by everyone, sticky or not), or writable by its group.
func TestExecStrictModes(t *testing.T) {
	script := writeScript(t, "exit 0\n")
	res, _ := probe(t, "127.0.0.1:8080", Check{Type: "exec", Command: []string{script}})
	wantResult(t, res, false, "which is writable by everyone (mode 1777)")
	if !strings.Contains(res.Reason, "or set strict_modes: false") {
		t.Errorf("reason %q does not name the opt-out", res.Reason)
	}
	if err := os.Chmod(script, 0o775); err != nil {
		t.Fatal(err)
	}
	res, _ = probe(t, "127.0.0.1:8080", Check{Type: "exec", Command: []string{script}})
	wantResult(t, res, false, "writable by group")
	// A bare name is looked up in PATH, then checked like any program.
	res, _ = probe(t, "127.0.0.1:8080", Check{Type: "exec", Command: []string{"true"}})
	wantResult(t, res, true, "")
}
