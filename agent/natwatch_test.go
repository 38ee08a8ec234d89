package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// TestFlushedTablesComeBackAtOnce: someone flushes the whole nftables
// ruleset under a running agent whose audit is an hour away; the tables,
// and with them the sync guard, are back well within a second.
func TestFlushedTablesComeBackAtOnce(t *testing.T) {
	e := newEnv(t)
	writeTestFile(t, e.dir+"/lvsd.yaml", "node: d1\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n"+
		"cluster: {peers: [10.0.0.3], key_file: key}\n")
	if err := os.WriteFile(e.dir+"/key", []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends: [{address: 10.0.0.11}]\n")
	e.running()

	installed := func() bool {
		rs, ok := e.nat.Current()
		return ok && !rs.Empty()
	}
	waitFor(t, 10*time.Second, "the first pass to write the tables", installed)
	applied, _ := e.nat.Calls()
	e.nat.Flush()
	start := time.Now()
	waitFor(t, time.Second, "the flushed tables to come back", installed)
	t.Logf("tables back after %s", time.Since(start))
	if again, _ := e.nat.Calls(); again <= applied {
		t.Errorf("no Apply after the flush (%d calls before, %d after)", applied, again)
	}
}

// running starts an agent on the test's files and kernel, its Check and
// Resync an hour away, as Run runs it, until the test ends, and returns it
// with the function that stops it (idempotent).
func (e *testEnv) running() (*Agent, func()) {
	a := New(Options{ConfigPath: filepath.Join(e.dir, "lvsd.yaml"), Kernel: e.kernel(), Check: time.Hour, Resync: time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, nil) }()
	stop := func() { cancel(); <-done }
	e.t.Cleanup(stop)
	return a, stop
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDaemonsStopWithoutTheirGuard: when lvsd's tables cannot be written
// (the guard may be gone), lvsd's running sync daemons are stopped;
// another program's stay.
func TestDaemonsStopWithoutTheirGuard(t *testing.T) {
	ctx := t.Context()
	daemons := ipvs.NewFake()
	ours := ipvs.Daemon{State: ipvs.DaemonBackup, Interface: "lo", SyncID: planner.SyncID, Port: 8849}
	theirs := ipvs.Daemon{State: ipvs.DaemonMaster, Interface: "lo", SyncID: 9, Port: 8848}
	for _, d := range []ipvs.Daemon{ours, theirs} {
		if _, err := daemons.StartDaemon(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	guarded, err := nat.Render(nat.Spec{SyncPorts: []uint16{8848, 8849}, SyncGroup: ipvs.DefaultSyncGroup})
	if err != nil {
		t.Fatal(err)
	}
	errs := Kernel{NAT: failingNAT{nat.NewFake()}, Daemons: daemons}.Apply(ctx, []planner.Op{{Kind: planner.ReplaceNAT, Detail: &planner.Detail{NAT: guarded}}})
	if errs[0] == nil {
		t.Fatal("the failed ReplaceNAT reported no error")
	}
	running, err := daemons.Daemons(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 1 || running[0].SyncID != 9 {
		t.Errorf("running after the failed guard: %+v; want only the other program's", running)
	}
}
