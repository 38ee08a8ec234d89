package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"
)

func TestDaemonCheck(t *testing.T) {
	bad := []Daemon{
		{Interface: "lo"},
		{State: 3, Interface: "lo"},
		{State: DaemonMaster},
		{State: DaemonMaster, Interface: "a-very-long-name"},
		{State: DaemonBackup, Interface: "lo", Group: netip.MustParseAddr("10.0.0.1")},
		{State: DaemonBackup, Interface: "lo", Group: netip.MustParseAddr("fd00::1")},
	}
	for _, d := range bad {
		if err := checkDaemon(d); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%v: got %v, want EINVAL", d, err)
		}
	}
	good := Daemon{State: DaemonBackup, Interface: "eth0.100", Group: netip.MustParseAddr("ff05::1:3")}
	if err := checkDaemon(good); err != nil {
		t.Errorf("%v: %v", good, err)
	}
}

func TestFakeDaemons(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	f.SetInterface("lo", 65536)
	start := func(d Daemon, want DaemonAction) {
		t.Helper()
		if got, err := f.StartDaemon(ctx, d); err != nil || got != want {
			t.Fatalf("StartDaemon(%v) = %v, %v; want %v", d, got, err, want)
		}
	}
	backup := Daemon{State: DaemonBackup, Interface: "lo", Port: 8849, MaxLen: 80}
	start(backup, DaemonStarted)
	start(Daemon{State: DaemonMaster, Interface: "lo", SyncID: 7}, DaemonStarted)
	start(Daemon{State: DaemonMaster, Interface: "lo", SyncID: 7, Port: 8848, TTL: 1}, DaemonUnchanged)
	start(backup, DaemonUnchanged) // MaxLen 80 is stored as 1024: still the same daemon
	start(Daemon{State: DaemonMaster, Interface: "lo", SyncID: 7, MaxLen: 200}, DaemonRestarted)
	got, _ := f.Daemons(ctx)
	want := []Daemon{
		{State: DaemonMaster, Interface: "lo", SyncID: 7, MaxLen: 200, Group: DefaultSyncGroup, Port: 8848, TTL: 1},
		{State: DaemonBackup, Interface: "lo", MaxLen: 1024, Group: DefaultSyncGroup, Port: 8849, TTL: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Daemons:\n got %v\nwant %v", got, want)
	}
	if _, err := f.StartDaemon(ctx, Daemon{State: DaemonMaster, Interface: "eth9"}); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("unknown interface: got %v, want ENODEV", err)
	}
	if got, _ := f.Daemons(ctx); len(got) != 2 {
		t.Errorf("a failed start must leave the running daemon alone: %v", got)
	}
	for range 2 { // stopping a stopped daemon is no error
		if err := f.StopDaemon(ctx, DaemonMaster); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := f.Daemons(ctx); len(got) != 1 || got[0].State != DaemonBackup {
		t.Errorf("after stopping the master: %v", got)
	}
	wantOps := []string{
		"start-daemon backup on lo syncid=0 group=224.0.0.81:8849 ttl=1 maxlen=1024",
		"start-daemon master on lo syncid=7 group=224.0.0.81:8848 ttl=1 maxlen=1472",
		"stop-daemon master",
		"start-daemon master on lo syncid=7 group=224.0.0.81:8848 ttl=1 maxlen=200",
		"stop-daemon master",
	}
	if ops := f.Ops(); !slices.Equal(ops, wantOps) {
		t.Errorf("ops:\n got %q\nwant %q", ops, wantOps)
	}
}
