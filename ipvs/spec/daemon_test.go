package spec

import (
	"net/netip"
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
		if got := c.in.Effective(c.mtu); got != c.want {
			t.Errorf("%s:\n got %v\nwant %v", c.name, got, c.want)
		}
	}
}

func TestDaemonSatisfies(t *testing.T) {
	master := Daemon{State: DaemonMaster, Interface: "lo", SyncID: 76, MaxLen: 44, Port: 9000}
	running := master.Effective(65536)
	if !running.Satisfies(master) {
		t.Errorf("%v does not satisfy %v", running, master)
	}
	backup := Daemon{State: DaemonBackup, Interface: "lo", SyncID: 76, Port: 9001}
	if r := backup.Effective(65536); !r.Satisfies(backup) {
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
