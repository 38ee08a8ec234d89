package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// TestSyncBackupRunning: only lvsd's backup daemon, where the relay
// writes, counts as running.
func TestSyncBackupRunning(t *testing.T) {
	backup := ipvs.Daemon{State: ipvs.DaemonBackup, Interface: "lo", SyncID: 76, Port: 8849}
	tests := []struct {
		name    string
		daemons []ipvs.Daemon
		want    bool
	}{
		{"none", nil, false},
		{"lvsd's backup", []ipvs.Daemon{backup}, true},
		{"a backup taking every sync ID", []ipvs.Daemon{{State: ipvs.DaemonBackup, Interface: "lo", Port: 8849}}, true},
		{"the master only", []ipvs.Daemon{{State: ipvs.DaemonMaster, Interface: "lo", SyncID: 76, Port: 8848}}, false},
		{"a backup on another port", []ipvs.Daemon{{State: ipvs.DaemonBackup, Interface: "lo", SyncID: 76, Port: 9000}}, false},
		{"another software's backup", []ipvs.Daemon{{State: ipvs.DaemonBackup, Interface: "lo", SyncID: 5, Port: 8849}}, false},
		{"a backup on another interface", []ipvs.Daemon{{State: ipvs.DaemonBackup, Interface: "eth0", SyncID: 76, Port: 8849}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := ipvs.NewFake()
			for _, d := range tt.daemons {
				if _, err := f.StartDaemon(t.Context(), d); err != nil {
					t.Fatal(err)
				}
			}
			got, err := SyncBackup{Daemons: f, Conns: &ipvs.ConnFake{}, Port: 8849}.BackupRunning(t.Context())
			if err != nil || got != tt.want {
				t.Fatalf("running %v (%v), want %v", got, err, tt.want)
			}
		})
	}
}

// TestSyncBackupConnections: the table as the relay checks it, without
// persistence templates.
func TestSyncBackupConnections(t *testing.T) {
	conn := ipvs.Connection{Protocol: l4.TCP, Client: netip.MustParseAddrPort("198.51.100.7:40000"),
		Virtual: netip.MustParseAddrPort("192.0.2.10:80"), Dest: netip.MustParseAddrPort("10.0.0.5:80"), State: "ESTABLISHED"}
	template := ipvs.Connection{Client: netip.MustParseAddrPort("198.51.100.7:0"), Virtual: netip.MustParseAddrPort("192.0.2.10:80")}
	table := &ipvs.ConnFake{}
	table.Set([]ipvs.Connection{conn, template}, nil)
	var got []connsync.ConnID
	err := SyncBackup{Daemons: ipvs.NewFake(), Conns: table, Port: 8849}.EachConnection(t.Context(), func(c connsync.ConnID) { got = append(got, c) })
	want := []connsync.ConnID{{Protocol: 6, Client: conn.Client, Virtual: conn.Virtual}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v (%v), want %v", got, err, want)
	}
}

// TestSlowBackupStart: the first start of a backup daemon waits, the
// master's and later ones do not.
func TestSlowBackupStart(t *testing.T) {
	f := ipvs.NewFake()
	s := &SlowBackupStart{SyncDaemons: f, Delay: 300 * time.Millisecond}
	ctx := context.Background()
	for _, c := range []struct {
		d    ipvs.Daemon
		slow bool
	}{
		{ipvs.Daemon{State: ipvs.DaemonMaster, Interface: "lo", SyncID: 76, Port: 8848}, false},
		{ipvs.Daemon{State: ipvs.DaemonBackup, Interface: "lo", SyncID: 76, Port: 8849}, true},
		{ipvs.Daemon{State: ipvs.DaemonBackup, Interface: "lo", SyncID: 76, Port: 9000}, false},
	} {
		start := time.Now()
		if _, err := s.StartDaemon(ctx, c.d); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); (took >= s.Delay) != c.slow {
			t.Errorf("starting %v took %v, slow %v", c.d, took, c.slow)
		}
	}
}
