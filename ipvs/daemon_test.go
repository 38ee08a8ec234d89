package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"
)

// effective must match start_sync_thread: defaults for group, port and TTL,
// MaxLen from the MTU for a backup, clamped to what the kernel stores.
func TestDaemonEffective(t *testing.T) {
	g6 := netip.MustParseAddr("ff02::81")
	cases := []struct {
		name string
		in   Daemon
		mtu  int
		want Daemon
	}{
		{"master defaults", Daemon{State: DaemonMaster, Interface: "lo"}, 65536,
			Daemon{State: DaemonMaster, Interface: "lo", MaxLen: 1472, Group: DefaultSyncGroup, Port: 8848, TTL: 1}},
		{"backup default maxlen from lo's MTU", Daemon{State: DaemonBackup, Interface: "lo", Port: 8849}, 65536,
			Daemon{State: DaemonBackup, Interface: "lo", MaxLen: 65507, Group: DefaultSyncGroup, Port: 8849, TTL: 1}},
		{"backup default maxlen at least 1500-28", Daemon{State: DaemonBackup, Interface: "eth0"}, 1400,
			Daemon{State: DaemonBackup, Interface: "eth0", MaxLen: 1472, Group: DefaultSyncGroup, Port: 8848, TTL: 1}},
		{"backup maxlen clamped up to 1024", Daemon{State: DaemonBackup, Interface: "lo", MaxLen: 80}, 65536,
			Daemon{State: DaemonBackup, Interface: "lo", MaxLen: 1024, Group: DefaultSyncGroup, Port: 8848, TTL: 1}},
		{"master maxlen kept", Daemon{State: DaemonMaster, Interface: "lo", MaxLen: 80, SyncID: 9, TTL: 3}, 65536,
			Daemon{State: DaemonMaster, Interface: "lo", MaxLen: 80, SyncID: 9, Group: DefaultSyncGroup, Port: 8848, TTL: 3}},
		{"master maxlen clamped down", Daemon{State: DaemonMaster, Interface: "lo", MaxLen: 65535}, 1500,
			Daemon{State: DaemonMaster, Interface: "lo", MaxLen: 65507, Group: DefaultSyncGroup, Port: 8848, TTL: 1}},
		{"IPv6 headers", Daemon{State: DaemonMaster, Interface: "eth0", Group: g6}, 1500,
			Daemon{State: DaemonMaster, Interface: "eth0", MaxLen: 1452, Group: g6, Port: 8848, TTL: 1}},
		{"4in6 group unmapped", Daemon{State: DaemonMaster, Interface: "eth0", Group: netip.MustParseAddr("::ffff:239.1.2.3")}, 1500,
			Daemon{State: DaemonMaster, Interface: "eth0", MaxLen: 1472, Group: netip.MustParseAddr("239.1.2.3"), Port: 8848, TTL: 1}},
	}
	for _, c := range cases {
		if got := c.in.effective(c.mtu); got != c.want {
			t.Errorf("%s:\n got %v\nwant %v", c.name, got, c.want)
		}
	}
}

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
		if err := d.check(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%v: got %v, want EINVAL", d, err)
		}
	}
	good := Daemon{State: DaemonBackup, Interface: "eth0.100", Group: netip.MustParseAddr("ff05::1:3")}
	if err := good.check(); err != nil {
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

func TestDaemonSatisfies(t *testing.T) {
	master := Daemon{State: DaemonMaster, Interface: "lo", SyncID: 76, MaxLen: 44, Port: 9000}
	running := master.effective(65536)
	if !running.Satisfies(master) {
		t.Errorf("%v does not satisfy %v", running, master)
	}
	backup := Daemon{State: DaemonBackup, Interface: "lo", SyncID: 76, Port: 9001}
	if r := backup.effective(65536); !r.Satisfies(backup) {
		t.Errorf("%v does not satisfy %v (payload size left to the kernel)", r, backup)
	}
	for _, other := range []Daemon{
		{State: DaemonMaster, Interface: "lo", SyncID: 77, MaxLen: 44, Port: 9000},
		{State: DaemonMaster, Interface: "lo", SyncID: 76, MaxLen: 1472, Port: 9000},
		{State: DaemonMaster, Interface: "lo", SyncID: 76, MaxLen: 44, Port: 9002},
		{State: DaemonBackup, Interface: "lo", SyncID: 76, MaxLen: 44, Port: 9000},
	} {
		if running.Satisfies(other) {
			t.Errorf("%v satisfies %v", running, other)
		}
	}
}
