package realserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
)

// notifier records what the role tells the service manager.
type notifier struct {
	mu     sync.Mutex
	states []string
}

func (n *notifier) Notify(state string) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.states = append(n.states, strings.TrimSpace(state))
	return true, nil
}

func (n *notifier) Watchdog() time.Duration { return 0 }

func (n *notifier) sent() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.states)
}

// runOptions are a real server on the fakes of e, its API socket in e.dir.
func (e *env) runOptions(n *notifier, healthListen string) RunOptions {
	e.t.Helper()
	body := "node: rs1\nrole: realserver\nstate_dir: state\napi: {socket: api.sock}\nmetrics: {listen: \"off\"}\n" +
		"realserver:\n  vips: [10.0.0.50]\n  health: {listen: \"" + healthListen + "\"}\n"
	if err := os.WriteFile(e.path(), []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	cfg, err := config.LoadAgent(e.path())
	if err != nil {
		e.t.Fatal(err)
	}
	return RunOptions{ConfigPath: e.path(), Config: cfg, Version: "test", Notifier: n,
		Log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Host: Host{Addrs: e.addrs, Sysctls: e.sys, Tunnels: modules{e.tun, e.sys}, NAT: e.nft}}
}

// Run serves the API, reports ready once it answers, reloads on a
// signal, and returns only after telling the service manager it stops.
func TestRun(t *testing.T) {
	e := newEnv(t, "  vips: []\n")
	n := &notifier{}
	o := e.runOptions(n, "off")
	reload := make(chan os.Signal)
	o.Reload = reload
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()

	isReady := func() bool {
		return slices.ContainsFunc(n.sent(), func(s string) bool { return strings.Contains(s, "READY=1") })
	}
	for deadline := time.Now().Add(5 * time.Second); !isReady(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %q", n.sent())
		}
	}
	var st Status
	if err := api.NewClient(filepath.Join(e.dir, "api.sock")).Do(ctx, "GET", RouteStatus, &st); err != nil || st.Node != "rs1" {
		t.Fatalf("status over the API: %+v %v", st, err)
	}
	reload <- syscall.SIGHUP // taken: Run reads its reload channel
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := n.sent(); got[len(got)-1] != "STOPPING=1" {
		t.Errorf("the last notification before Run returned: %q, want STOPPING=1", got)
	}
}

// A socket that cannot be opened stops Run before it touches the host,
// and what it opened already is closed again.
func TestRunSocketInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	e := newEnv(t, "  vips: []\n")
	n := &notifier{}
	err = Run(context.Background(), e.runOptions(n, busy.Addr().String()))
	if err == nil || !strings.Contains(err.Error(), "realserver.health.listen") {
		t.Fatalf("Run with the health port taken: %v", err)
	}
	if ops := e.addrs.Ops(); len(ops) > 0 {
		t.Errorf("host calls before failing: %q", ops)
	}
	if len(n.sent()) > 0 {
		t.Errorf("notified before failing: %q", n.sent())
	}
	if _, err := net.Dial("unix", filepath.Join(e.dir, "api.sock")); err == nil {
		t.Error("the API socket still answers")
	}
}
