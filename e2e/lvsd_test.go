//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
)

// lvsd is one lvsd process running in a host's namespace.
type lvsd struct {
	t    *testing.T
	host *topo.Host
	dir  string // config, services.d and state
	logf string
	cmd  *exec.Cmd
	// exited is closed once the process has been waited for; waitErr is
	// then what Wait returned.
	exited  chan struct{}
	waitErr error
	// profile, when set, is where lvsd writes a CPU profile of its run
	// (LVSD_CPU_PROFILE).
	profile string
	// env is added to lvsd's environment (test knobs).
	env []string
	// bin, when set, is the lvsd binary to run instead of LVSD_BIN (the
	// release before, for the mixed-version tests).
	bin string
}

// testDir returns a per-test folder on the read-write share, so logs can be
// read after the VM is gone.
func testDir(t *testing.T) string {
	t.Helper()
	base := outDir
	if base == "" {
		base = t.TempDir()
	}
	dir := filepath.Join(base, strings.ReplaceAll(t.Name(), "/", "_"))
	os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "services.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// keepDir returns the test's folder on the read-write share, created and
// not cleared, for what must outlive the VM next to the logs ("" without a
// share, or when it cannot be made).
func keepDir(t *testing.T) string {
	if outDir == "" {
		return ""
	}
	dir := filepath.Join(outDir, strings.ReplaceAll(t.Name(), "/", "_"))
	if os.MkdirAll(dir, 0o755) != nil {
		return ""
	}
	return dir
}

// newDirector writes an agent file for host and the given service files
// (name → YAML) into a fresh folder. Start it with start. The agent file
// turns strict_modes off: the test folders, and the hooks in them, are on
// /tmp or on a share a user may own.
func newDirector(t *testing.T, host *topo.Host, services map[string]string) *lvsd {
	t.Helper()
	dir := testDir(t)
	// Unix sockets on 9p are not dependable; /run is the guest's tmpfs. One
	// socket per host netns name: several agents may run at once.
	if err := os.MkdirAll("/run/lvsd-e2e", 0o755); err != nil {
		t.Fatal(err)
	}
	agentFile := fmt.Sprintf("node: %s\nrole: director\ninterface: %s\nservices_dir: services.d\nstate_dir: state\napi: {socket: /run/lvsd-e2e/%s.sock}\nlog: {level: debug}\nstrict_modes: false\n",
		host.ID, host.Link, host.Name)
	writeFile(t, filepath.Join(dir, "lvsd.yaml"), agentFile)
	for name, body := range services {
		writeFile(t, filepath.Join(dir, "services.d", name+".yaml"), body)
	}
	return &lvsd{t: t, host: host, dir: dir, logf: filepath.Join(dir, "lvsd.log")}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs `lvsd run` in the host's namespace and stops it (SIGTERM) when
// the test ends, showing its log if the test failed.
func (l *lvsd) start() {
	l.t.Helper()
	logFile, err := os.OpenFile(l.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		l.t.Fatal(err)
	}
	l.cmd = exec.Command(cmp.Or(l.bin, lvsdBin), "run", "--config", filepath.Join(l.dir, "lvsd.yaml"))
	l.cmd.Stdout, l.cmd.Stderr = logFile, logFile
	if l.profile != "" || len(l.env) > 0 {
		l.cmd.Env = append(os.Environ(), l.env...)
	}
	if l.profile != "" {
		l.cmd.Env = append(l.cmd.Env, "LVSD_CPU_PROFILE="+l.profile)
	}
	if err := l.host.Start(l.cmd); err != nil {
		logFile.Close()
		l.t.Fatalf("starting lvsd in %v: %v", l.host, err)
	}
	logFile.Close()
	l.exited = make(chan struct{})
	go func(l *lvsd, cmd *exec.Cmd) {
		l.waitErr = cmd.Wait()
		close(l.exited)
	}(l, l.cmd)
	l.t.Cleanup(func() {
		l.stop()
		if l.t.Failed() {
			l.t.Logf("lvsd %s warned: %s", l.host.ID, warnings(l.log(), 12))
			l.t.Logf("lvsd log (%s):\n%s", l.logf, l.log())
		}
	})
}

// stop sends SIGTERM and waits for the process.
func (l *lvsd) stop() {
	if l.cmd == nil {
		return
	}
	select {
	case <-l.exited:
		return
	default:
	}
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.exited:
	case <-time.After(10 * time.Second):
		_ = l.cmd.Process.Kill()
		<-l.exited
	}
}

// warnings sums up a log's last max warnings and errors on one line:
// reports of a failed run often keep only the first line of each message,
// and the full log of every director comes after it.
func warnings(log string, max int) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		if i := strings.Index(line, "T"); i >= 0 && len(line) > i+13 {
			line = line[i+1:] // the clock time is enough here
		}
		out = append(out, strings.Replace(line, " level=", " ", 1))
	}
	if len(out) == 0 {
		return "nothing"
	}
	if len(out) > max {
		out = append([]string{fmt.Sprintf("(%d more before)", len(out)-max)}, out[len(out)-max:]...)
	}
	return strings.Join(out, " | ")
}

func (l *lvsd) log() string {
	b, _ := os.ReadFile(l.logf)
	return string(b)
}

// ipvs opens the IPVS table of the lvsd host's namespace, to read what lvsd
// programmed.
func (l *lvsd) ipvs() *ipvs.Kernel {
	l.t.Helper()
	k := openIPVS(l.t, l.host)
	l.t.Cleanup(k.Close)
	return k
}

// openIPVS opens the IPVS table of h's namespace; the caller closes it.
func openIPVS(t testing.TB, h *topo.Host) *ipvs.Kernel {
	t.Helper()
	k, err := ipvs.Open("/run/netns/" + h.Name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// waitServices waits until the kernel holds n IPVS services with all their
// destinations and lvsd logged the end of that reconcile, failing early if
// lvsd exits.
func (l *lvsd) waitServices(n, destsEach int) []ipvs.Service {
	l.t.Helper()
	k := l.ipvs()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		svcs, err := k.Services(ctx)
		// Not counted: connection sync's pusher service on 127.0.0.1.
		svcs = slices.DeleteFunc(svcs, func(s ipvs.Service) bool { return s.Addr.IsLoopback() })
		if err == nil && len(svcs) == n {
			ok := true
			for _, s := range svcs {
				d, err := k.Destinations(ctx, s.ServiceKey)
				ok = ok && err == nil && len(d) == destsEach
			}
			if ok && strings.Contains(l.log(), "msg=reconciled") {
				return svcs // the whole first pass is done, VIP included
			}
		}
		select {
		case <-l.exited:
			l.t.Fatalf("lvsd exited (%v) before programming %d services; log:\n%s", l.waitErr, n, l.log())
		default:
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("after 30s the kernel has %d services (err %v), want %d with %d destinations each; log:\n%s",
				len(svcs), err, n, destsEach, l.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs a command in host's namespace and fails the test on error.
func run(t *testing.T, host *topo.Host, name string, args ...string) string {
	t.Helper()
	out, err := host.Run(context.Background(), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runLVSD runs a one-shot lvsd subcommand (check, plan…) and returns its
// combined output and exit code.
func runLVSD(t *testing.T, host *topo.Host, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(lvsdBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := host.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if cmd.ProcessState == nil {
		t.Fatalf("running lvsd %v: %v", args, err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}
