//go:build e2e

package systemd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sh runs a command (in the VM's root namespace) and returns its combined
// output, failing the test when it fails. Under TCG every command costs
// 0.1-0.3 s; slower ones are logged, to show where the time goes.
func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	start := time.Now()
	out, err := try(name, args...)
	if d := time.Since(start); d > time.Second {
		t.Logf("%.1fs: %s %s", d.Seconds(), name, strings.Join(args, " "))
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// try runs a command and returns its combined output and error.
func try(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// eventually polls f every 200 ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %s: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeFile writes a file the way an editor would replace it.
func writeFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// unitProp reads one property of a unit (systemctl show -p).
func unitProp(t *testing.T, unit, prop string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "systemctl", "show", "--value", "-p", prop, unit))
}

// journal returns lvsd.service's journal entries, oldest first.
func journal(t *testing.T) []map[string]any {
	t.Helper()
	out := sh(t, "journalctl", "-u", "lvsd.service", "-o", "json", "--no-pager")
	var entries []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" || line == "-- No entries --" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("journalctl -o json: %v: %s", err, line)
		}
		entries = append(entries, e)
	}
	return entries
}

// saveArtifacts copies what explains a failure to the --rw share.
func saveArtifacts(t *testing.T) {
	dir := os.Getenv("LVSD_E2E_OUT")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	for name, cmd := range map[string][]string{
		"journal.txt":       {"journalctl", "-b", "--no-pager", "-o", "short-precise"},
		"lvsd.journal.json": {"journalctl", "-u", "lvsd.service", "-o", "json", "--no-pager"},
		"systemctl.txt":     {"systemctl", "status", "--no-pager", "lvsd.service"},
		"ipvsadm.txt":       {"ipvsadm", "-Ln", "--stats"},
		"security.txt":      {"systemd-analyze", "security", "--no-pager", "lvsd.service"},
		"failed-units.txt":  {"systemctl", "list-units", "--failed", "--no-pager"},
		"lvsd-status.txt":   {"lvsd", "status"},
		"dpkg-status.txt":   {"dpkg", "-s", "lvsd"},
		"modules-load.txt":  {"systemctl", "status", "--no-pager", "systemd-modules-load.service"},
	} {
		out, err := try(cmd[0], cmd[1:]...)
		if err != nil {
			out += fmt.Sprintf("\n(%v)\n", err)
		}
		os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644)
	}
	t.Logf("logs in %s", dir)
}
