//go:build vmtest && linux

package ipvs

// The VM tier: real IPVS (the build hosts' kernel has none). Run with
//
//	make e2e E2E_PKGS=./ipvs RUN='Daemon|Sync'
//
// or go test -tags vmtest -count=1 -v -exec "$PWD/e2e/vm/run --" ./ipvs/

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/vishvananda/netns"
)

var vmNSSeq atomic.Int32

// vmNS is a named network namespace for one test; lo starts down.
type vmNS struct{ name, path string }

func newVMNS(t *testing.T) vmNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: run in the VM (e2e/vm/run)")
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Fatalf("no IPVS in this kernel (%v): run this test in the VM (e2e/vm/run)", err)
	}
	name := fmt.Sprintf("lvsd-ipvs-%d-%d", os.Getpid(), vmNSSeq.Add(1))
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return vmNS{name: name, path: "/run/netns/" + name}
}

// run runs a command and returns its output; failing fails the test.
func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// in runs f on a thread inside the namespace: sockets it creates and
// /proc/sys files it opens belong to the namespace.
func (ns vmNS) in(t *testing.T, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.GetFromPath(ns.path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // the thread must not go back to the pool in the wrong namespace
		}
	}()
	f()
}

func openVM(t *testing.T, path string) *Kernel {
	t.Helper()
	k, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}

func TestVMSyncDaemon(t *testing.T) {
	ctx := context.Background()
	ns := newVMNS(t)
	k := openVM(t, ns.path)
	if ds, err := k.Daemons(ctx); err != nil || len(ds) != 0 {
		t.Fatalf("fresh namespace: daemons %v, %v", ds, err)
	}
	master := Daemon{State: DaemonMaster, Interface: "lo", SyncID: 7}
	backup := Daemon{State: DaemonBackup, Interface: "lo", SyncID: 7, Port: 8849}

	// The new namespace's lo is down: the master cannot send.
	_, err := k.StartDaemon(ctx, master)
	t.Logf("master on a down lo: %v", err)
	if err == nil {
		t.Fatal("master on a down interface started")
	}
	run(t, "ip", "-n", ns.name, "link", "set", "lo", "up")

	start := func(d Daemon, want DaemonAction) {
		t.Helper()
		if got, err := k.StartDaemon(ctx, d); err != nil || got != want {
			t.Fatalf("StartDaemon(%v) = %v, %v; want %v", d, got, err, want)
		}
	}
	start(master, DaemonStarted)
	start(master, DaemonUnchanged)
	// One master and one backup per namespace; both on lo, on other ports so
	// the backup does not read its own master.
	start(backup, DaemonStarted)
	start(Daemon{State: DaemonBackup, Interface: "lo", SyncID: 7, Port: 8849, TTL: 1, Group: DefaultSyncGroup}, DaemonUnchanged)
	want := []Daemon{
		{State: DaemonMaster, Interface: "lo", SyncID: 7, MaxLen: 1472, Group: DefaultSyncGroup, Port: 8848, TTL: 1},
		{State: DaemonBackup, Interface: "lo", SyncID: 7, MaxLen: 65507, Group: DefaultSyncGroup, Port: 8849, TTL: 1},
	}
	checkDaemons(t, k, want)

	// The backup's receive socket is bound to lo (make_receive_sock sets
	// sk_bound_dev_if): multicast arriving on other interfaces is not read.
	ss := run(t, "ip", "netns", "exec", ns.name, "ss", "-uanH")
	t.Logf("ss -uan in the namespace:\n%s", ss)
	if !strings.Contains(ss, "224.0.0.81%lo:8849") {
		t.Errorf("backup socket not bound to lo:\n%s", ss)
	}

	// Settings change only by a restart; a clamped MaxLen is no change.
	start(Daemon{State: DaemonMaster, Interface: "lo", SyncID: 7, MaxLen: 200}, DaemonRestarted)
	start(Daemon{State: DaemonBackup, Interface: "lo", SyncID: 7, Port: 8849, MaxLen: 80}, DaemonRestarted)
	start(Daemon{State: DaemonBackup, Interface: "lo", SyncID: 7, Port: 8849, MaxLen: 1000}, DaemonUnchanged)
	want[0].MaxLen, want[1].MaxLen = 200, 1024
	checkDaemons(t, k, want)

	// The kernel's own answers, without StartDaemon's checks.
	c, err := k.genl(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.s.Close()
	if _, err := c.exec(genlCmdNewDaemon, 0, encodeDaemon(master, true)); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("second master: got %v, want EEXIST", err)
	}
	other := Daemon{State: DaemonBackup, Interface: "lo", Group: netip.MustParseAddr("10.1.2.3")}
	k.StopDaemon(ctx, DaemonBackup)
	if _, err := c.exec(genlCmdNewDaemon, 0, encodeDaemon(other, true)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("unicast group: got %v, want EINVAL", err)
	}
	if _, err := k.StartDaemon(ctx, other); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("StartDaemon with a unicast group: got %v, want EINVAL", err)
	}
	missing := Daemon{State: DaemonMaster, Interface: "nosuch0"}
	if _, err := c.exec(genlCmdNewDaemon, 0, encodeDaemon(missing, true)); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("kernel, missing interface: got %v, want ENODEV", err)
	}
	// StartDaemon refuses before stopping the running master.
	_, err = k.StartDaemon(ctx, missing)
	t.Logf("missing interface: %v", err)
	if !errors.Is(err, syscall.ENODEV) {
		t.Errorf("missing interface: got %v, want ENODEV", err)
	}
	checkDaemons(t, k, want[:1])

	// The daemons live in the namespace, not in the VM's own.
	if ds, err := openVM(t, "").Daemons(ctx); err != nil || len(ds) != 0 {
		t.Errorf("root namespace: daemons %v, %v", ds, err)
	}

	for range 2 { // stopping what does not run is no error
		for _, s := range []DaemonState{DaemonMaster, DaemonBackup} {
			if err := k.StopDaemon(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkDaemons(t, k, nil)
}

func checkDaemons(t *testing.T, k *Kernel, want []Daemon) {
	t.Helper()
	got, err := k.Daemons(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Daemons:\n got %v\nwant %v", got, want)
	}
}
