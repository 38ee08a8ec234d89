package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat"
	"github.com/lvsd/lvsd/nat/toa"
)

// A snapshot written to a file and read back answers every read of the
// Kernel as the host it was taken of did, whatever the kernel held:
// fwmark and IPv6 services, tunnels, thresholds, connection counts, sync
// daemons, timeouts, missing sysctls.
func TestSnapshotReadsAsTheHost(t *testing.T) {
	ctx := context.Background()
	f := ipvs.NewFake()
	v6 := ipvs.ServiceKey{Addr: netip.MustParseAddr("2001:db8::50"), Port: 443, Protocol: l4.TCP, IPv6: true}
	mark := ipvs.ServiceKey{FWMark: 7}
	udp := ipvs.ServiceKey{Addr: netip.MustParseAddr("10.0.0.53"), Port: 53, Protocol: l4.UDP}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.AddService(ctx, ipvs.Service{ServiceKey: v6, Scheduler: "wrr", Flags: ipvs.FlagPersistent, Timeout: 300, Netmask: 64}))
	must(f.AddService(ctx, ipvs.Service{ServiceKey: mark, Scheduler: "mh", Flags: ipvs.FlagMHFallback | ipvs.FlagMHPort}))
	must(f.AddService(ctx, ipvs.Service{ServiceKey: udp, Scheduler: "rr", Flags: ipvs.FlagOnePacket}))
	for _, d := range []ipvs.Destination{
		{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr("2001:db8::12"), Port: 443}, Weight: 3, Forwarding: ipvs.Masquerade,
			UpperThreshold: 100, LowerThreshold: 50},
		{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr("2001:db8::11"), Port: 443}, Weight: 0, Forwarding: ipvs.Masquerade},
	} {
		must(f.AddDestination(ctx, v6, d))
	}
	must(f.AddDestination(ctx, mark, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.21")}, Weight: 1,
		Forwarding: ipvs.Tunnel, Tunnel: ipvs.TunnelOptions{Type: ipvs.TunnelGUE, Port: 6080, Flags: ipvs.TunnelRemoteChecksum}}))
	must(f.AddDestination(ctx, udp, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.31"), Port: 53},
		Weight: 1, Forwarding: ipvs.DirectRoute}))
	_, err := f.StartDaemon(ctx, ipvs.Daemon{State: ipvs.DaemonBackup, Interface: "lo", SyncID: 4, MaxLen: 1500,
		Group: ipvs.DefaultSyncGroup, Port: 8848, TTL: 1})
	must(err)
	must(f.SetTimeouts(ctx, ipvs.Timeouts{TCP: 600 * time.Second, TCPFin: 30 * time.Second, UDP: 60 * time.Second}))
	addrs := arp.NewFake("eth0")
	must(addrs.Add(ctx, "eth0", netip.MustParsePrefix("10.0.0.50/32")))
	nft := nat.NewFake()
	rs, err := nat.Render(nat.Spec{})
	must(err)
	must(nft.Apply(ctx, rs))
	prog := toa.NewFakeDirector()
	must(prog.SetServices(ctx, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.50:443"), netip.MustParseAddrPort("[2001:db8::50]:443")}))
	must(prog.Attach(ctx, "eth0"))
	host := Kernel{IPVS: f, Daemons: f, Timeouts: f, NAT: nft, Sysctls: sysctl.NewFake(map[string]string{
		"net/ipv4/ip_forward": "1", "net/ipv4/vs/expire_nodest_conn": "1"}), Addrs: addrs, TOA: prog}

	dir := t.TempDir()
	agentFile := filepath.Join(dir, "lvsd.yaml")
	must(os.WriteFile(agentFile, []byte("role: director\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "services.d"), 0o755))
	cfg, err := LoadConfig(agentFile)
	must(err)
	snap, err := TakeSnapshot(ctx, agentFile, cfg, host, nil, "test")
	must(err)
	b, err := json.Marshal(snap)
	must(err)
	file := filepath.Join(dir, "snap.json")
	must(os.WriteFile(file, b, 0o644))
	read, err := ReadSnapshot(file)
	must(err)
	got := read.kernel()

	same := func(what string, want, have any, wantErr, haveErr error) {
		t.Helper()
		if wantErr != nil || haveErr != nil || !reflect.DeepEqual(want, have) {
			t.Errorf("%s: from the snapshot %+v (%v), on the host %+v (%v)", what, have, haveErr, want, wantErr)
		}
	}
	ws, we := host.IPVS.Services(ctx)
	hs, he := got.IPVS.Services(ctx)
	same("services", ws, hs, we, he)
	for _, key := range []ipvs.ServiceKey{v6, mark, udp} {
		wd, we := host.IPVS.Destinations(ctx, key)
		for i := range wd {
			wd[i].Stats = nil
		}
		hd, he := got.IPVS.Destinations(ctx, key)
		same(key.String(), wd, hd, we, he)
	}
	wdm, we := host.Daemons.Daemons(ctx)
	hdm, he := got.Daemons.Daemons(ctx)
	same("daemons", wdm, hdm, we, he)
	wt, we := host.Timeouts.Timeouts(ctx)
	ht, he := got.Timeouts.Timeouts(ctx)
	same("timeouts", wt, ht, we, he)
	wn, we := host.NAT.Installed(ctx)
	hn, he := got.NAT.Installed(ctx)
	same("nft digest", wn, hn, we, he)
	wtoa, we := host.readTOA(ctx)
	htoa, he := got.readTOA(ctx)
	same("toa", wtoa, htoa, we, he)
	wa, we := host.Addrs.List(ctx, "eth0")
	ha, he := got.Addrs.List(ctx, "eth0")
	same("addresses", wa, ha, we, he)
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv4/vs/expire_nodest_conn"} {
		wv, we := host.Sysctls.Get(ctx, key)
		hv, he := got.Sysctls.Get(ctx, key)
		same(key, wv, hv, we, he)
	}
	if _, err := got.Sysctls.Get(ctx, "net/ipv4/vs/sloppy_tcp"); !errors.Is(err, sysctl.ErrMissing) {
		t.Errorf("a sysctl the host lacks: %v, want it missing", err)
	}
	if err := got.IPVS.DeleteService(ctx, v6); err == nil {
		t.Error("a snapshot took a change")
	}
}
