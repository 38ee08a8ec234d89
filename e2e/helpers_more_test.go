//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/e2e/topo"
)

// Helpers shared by the reload, restart, bad-config, affinity and foreign
// tests: reading lvsd's text log, signalling it, and snapshots of kernel
// state that can be compared byte for byte.

// ipvsSave returns `ipvsadm -Sn` in the host's namespace: the kernel's IPVS
// table in restorable form, one line per service and per destination.
func ipvsSave(t *testing.T, h *topo.Host) string {
	t.Helper()
	return run(t, h, "ipvsadm", "-Sn")
}

// runInput runs a command in the host's namespace with stdin and fails the
// test on error (ipvsadm -R, nft -f -: one exec instead of one per rule,
// because an exec costs up to 0.35 s under qemu/TCG).
func runInput(t *testing.T, h *topo.Host, stdin, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := h.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		t.Fatalf("%v: %s %s: %v: %s", h, name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// lineDiff compares two line-oriented snapshots as multisets and returns the
// lines only in after (added) and only in before (removed).
func lineDiff(before, after string) (added, removed []string) {
	count := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(before), "\n") {
		count[l]++
	}
	for _, l := range strings.Split(strings.TrimSpace(after), "\n") {
		if count[l] > 0 {
			count[l]--
		} else {
			added = append(added, l)
		}
	}
	for l, n := range count {
		for ; n > 0; n-- {
			removed = append(removed, l)
		}
	}
	slices.Sort(removed)
	return added, removed
}

// addrsOf lists the addresses on the host's Link, in-process.
func addrsOf(t *testing.T, h *topo.Host) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	err := h.Do(func() (err error) {
		out, err = arp.Kernel{}.List(context.Background(), h.Link)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeAtomic replaces a file by renaming a temporary one over it, as an
// editor or a config-management tool does: lvsd polls the services folder,
// and a truncate-then-write could let it read an empty file, which is a
// valid configuration without services (and would drain them). The
// temporary name does not end in .yaml, so lvsd never loads it.
func writeAtomic(t *testing.T, path, body string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// logSize marks the current end of lvsd's log, for logSince and waitLog.
func (l *lvsd) logSize() int { return len(l.log()) }

// logSince returns what lvsd logged after the mark off.
func (l *lvsd) logSince(off int) string {
	s := l.log()
	if off > len(s) {
		return ""
	}
	return s[off:]
}

// waitLog waits until a complete line logged after the mark off contains
// every string of want, and returns it. It fails the test if lvsd exits or
// the line does not come within timeout.
func (l *lvsd) waitLog(off int, timeout time.Duration, want ...string) string {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		text := l.logSince(off)
		if i := strings.LastIndexByte(text, '\n'); i >= 0 {
			for _, line := range strings.Split(text[:i], "\n") {
				if containsAll(line, want) {
					return line
				}
			}
		}
		l.checkAlive()
		if time.Now().After(deadline) {
			l.t.Fatalf("lvsd did not log a line with %q within %v; it logged since the mark:\n%s", want, timeout, text)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsAll(s string, subs []string) bool {
	for _, w := range subs {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// checkAlive fails the test if the lvsd process has exited.
func (l *lvsd) checkAlive() {
	l.t.Helper()
	select {
	case <-l.exited:
		l.t.Fatalf("lvsd exited (%v); log:\n%s", l.waitErr, l.log())
	default:
	}
}

// hup sends SIGHUP (reload). Only send it once lvsd logged "starting": until
// it has installed its handler, SIGHUP would kill it.
func (l *lvsd) hup() {
	l.t.Helper()
	if err := l.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		l.t.Fatalf("SIGHUP to lvsd: %v", err)
	}
}

// barrier returns once lvsd has finished everything triggered before the
// call. lvsd handles triggers one at a time on one goroutine (reload, then
// reconcile), so when it logs the reload for this SIGHUP, every earlier
// reconcile is complete. The reconcile that follows this reload is not
// waited for; call barrier twice to include it.
func (l *lvsd) barrier() {
	l.t.Helper()
	off := l.logSize()
	l.hup()
	l.waitLog(off, 15*time.Second, "configuration reloaded", "trigger=signal")
}

// expectIdle lets the agent run two more passes (barrier twice) and fails
// if it applied any op after the mark off: what is in place must read back
// as written.
func (l *lvsd) expectIdle(off int, who string) {
	l.t.Helper()
	l.barrier()
	l.barrier()
	if ops := appliedOps(l.logSince(off)); len(ops) > 0 {
		l.t.Errorf("%s applied ops, want none:\n%s", who, formatOps(ops))
	}
}

// expectSameHost fails if the snapshot now differs from before.
func expectSameHost(t *testing.T, what, before, now string) {
	t.Helper()
	if now != before {
		a, r := lineDiff(before, now)
		t.Errorf("%s changed the host:\nadded %q\nremoved %q", what, a, r)
	}
}

// appliedOp is one `msg=applied` line of lvsd's text log: one netlink (or
// nftables) change.
type appliedOp struct {
	Kind string // op=…: add-destination, update-service, …
	Line string
}

// appliedOps returns the applied ops in a stretch of lvsd's text log.
func appliedOps(text string) []appliedOp {
	var out []appliedOp
	for _, line := range strings.Split(text, "\n") {
		if !strings.Contains(line, " msg=applied ") {
			continue
		}
		op := appliedOp{Line: line}
		if _, rest, ok := strings.Cut(line, " op="); ok {
			op.Kind, _, _ = strings.Cut(rest, " ")
		}
		out = append(out, op)
	}
	return out
}

func formatOps(ops []appliedOp) string {
	if len(ops) == 0 {
		return "(none)"
	}
	lines := make([]string, len(ops))
	for i, o := range ops {
		lines[i] = o.Line
	}
	return strings.Join(lines, "\n")
}

// newDirectorOnTmpfs is newDirector with the configuration, services folder
// and state in t.TempDir() (the VM's tmpfs) instead of the read-write 9p
// share: for tests that rewrite service files many times, as 9p round trips
// are slow under TCG. The log stays on the share, so it survives the VM, and
// so does a copy of the initial configuration.
func newDirectorOnTmpfs(t *testing.T, host *topo.Host, services map[string]string) *lvsd {
	t.Helper()
	l := newDirector(t, host, services)
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(l.dir)); err != nil {
		t.Fatal(err)
	}
	l.dir = dir
	return l
}
