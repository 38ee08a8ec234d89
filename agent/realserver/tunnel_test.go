package realserver

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/nat"
)

func tunnelConfig(encap config.Encap, vips ...string) config.RealServer {
	t := config.RealServerTunnel{Encap: encap, MTU: config.DefaultTunnelMTU, ClampMSS: true}
	if encap == config.EncapGUE {
		t.Port = 6080
	}
	for _, v := range vips {
		t.VIPs = append(t.VIPs, netip.MustParseAddr(v))
	}
	return config.RealServer{ARPInterfaces: []string{"eth0"}, Tunnel: t}
}

// The devices follow the VIPs' families and the encapsulation; the MSS
// clamp follows the MTU less the worst overhead of the encapsulation.
func TestBuildDecapsulation(t *testing.T) {
	cases := []struct {
		name  string
		rs    config.RealServer
		links []string
		fou   []arp.FouPort
		nft   []string
	}{
		{"ipip, both families", tunnelConfig(config.EncapIPIP, "203.0.113.10", "2001:db8::10"),
			[]string{"ip6tnl0 ip6tnl", "tunl0 ipip"}, nil,
			[]string{"ip saddr 203.0.113.10 tcp flags syn,ack / fin,syn,rst,ack tcp option maxseg size > 1440 tcp option maxseg size set 1440",
				"ip6 saddr 2001:db8::10 tcp flags syn,ack / fin,syn,rst,ack tcp option maxseg size > 1400 tcp option maxseg size set 1400"}},
		{"gue", tunnelConfig(config.EncapGUE, "203.0.113.10"), []string{"tunl0 ipip"}, []arp.FouPort{{Port: 6080}},
			[]string{"maxseg size set 1428"}},
		{"gre", tunnelConfig(config.EncapGRE, "203.0.113.10"), []string{"gre0 gre"}, nil, []string{"maxseg size set 1436"}},
		{"gre, IPv6 as ip6ip6", tunnelConfig(config.EncapGRE, "2001:db8::10"), []string{"ip6tnl0 ip6tnl"}, nil, []string{"maxseg size set 1400"}},
		{"DR only", config.RealServer{}, nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := build(c.rs, []netip.Addr{netip.MustParseAddr("198.51.100.1")})
			var links []string
			for _, l := range d.Tunnel.Links {
				links = append(links, l.Name+" "+l.Kind)
			}
			if !slices.Equal(links, c.links) || !slices.Equal(d.Tunnel.FouPorts, c.fou) {
				t.Errorf("links %q fou %v, want %q %v", links, d.Tunnel.FouPorts, c.links, c.fou)
			}
			for _, want := range c.nft {
				if !strings.Contains(d.Tunnel.NAT.String(), want) {
					t.Errorf("nft lacks %q:\n%s", want, d.Tunnel.NAT)
				}
			}
			if d.Tunnel.wantsNAT() != (len(c.nft) > 0) {
				t.Errorf("wantsNAT = %v", d.Tunnel.wantsNAT())
			}
			if n := len(d.Addresses); n != 1+len(c.rs.Tunnel.VIPs) {
				t.Errorf("%d addresses on lo, want the DR VIP and every tunnel VIP: %v", n, d.Addresses)
			}
			v4dev := false
			for _, l := range d.Tunnel.Links {
				i := slices.IndexFunc(d.Settings, func(s Setting) bool { return s.Key == "net/ipv4/conf/"+l.Name+"/rp_filter" })
				if (i >= 0) != (l.Kind != arp.KindIP6IP6) || i >= 0 && d.Settings[i].Value != "0" {
					t.Errorf("%s: rp_filter setting %v (want 0 on IPv4 devices only)", l.Name, i)
				}
				v4dev = v4dev || i >= 0
			}
			// The kernel takes the larger of all and the device: with an
			// IPv4 tunnel device, all must be 0 too; otherwise loose will do.
			for _, s := range d.Settings {
				if s.Key == "net/ipv4/conf/all/rp_filter" && (s.Value == "0") != v4dev {
					t.Errorf("all/rp_filter wanted %s (accepting %v) with IPv4 tunnel devices = %v", s.Value, s.Accept, v4dev)
				}
			}
		})
	}
	off := tunnelConfig(config.EncapIPIP, "203.0.113.10")
	off.Tunnel.ClampMSS = false
	if d := build(off, nil); d.Tunnel.wantsNAT() {
		t.Errorf("clamp_mss false still wants nftables:\n%s", d.Tunnel.NAT)
	}
}

// modules behaves as the kernel does when a tunnel module loads: its
// fallback device appears with the interface's sysctls, rp_filter strict as
// a RHEL-like default.
type modules struct {
	*arp.FakeTunnels
	sys *sysctl.Fake
}

func (m modules) CreateLink(ctx context.Context, dev, kind string) (bool, error) {
	created, err := m.FakeTunnels.CreateLink(ctx, dev, kind)
	if err == nil && kind != arp.KindIP6IP6 {
		m.sys.AddInterface(dev)
		m.sys.Put("net/ipv4/conf/"+dev+"/rp_filter", "1")
	}
	return created, err
}

// tunnelHost is a fresh host: lo, eth0, no tunnel module loaded.
func tunnelHost(t *testing.T) (Host, *arp.FakeTunnels, *nat.Fake) {
	sys := sysctl.NewFakeConf("eth0")
	tun, nft := arp.NewFakeTunnels(), nat.NewFake()
	return Host{Addrs: newLo(t), Sysctls: sys, Tunnels: modules{tun, sys}, NAT: nft}, tun, nft
}

// reconcileOnce runs the agent's rounds: one, and another after a device
// was created. It returns the ops of each round.
func reconcileOnce(t *testing.T, h Host, d Desired, rec *Record) [][]string {
	t.Helper()
	var rounds [][]string
	for range 3 {
		ops := planFor(t, h, d, *rec)
		if len(ops) == 0 {
			break
		}
		if err := h.Apply(context.Background(), ops, rec, func(Record) error { return nil }); err != nil {
			t.Fatal(err)
		}
		rounds = append(rounds, opStrings(ops))
	}
	return rounds
}

// Start: the module's device appears first; once it exists its strict
// rp_filter is loosened and only then does it come up, after the VIPs, the
// GUE port and the clamp. The record holds what lvsd did, not the device
// the module made. Cleanup undoes exactly that, device first.
func TestTunnelLifecycle(t *testing.T) {
	h, tun, nft := tunnelHost(t)
	d := build(tunnelConfig(config.EncapGUE, "203.0.113.10"), nil)
	var rec Record
	rounds := reconcileOnce(t, h, d, &rec)
	want := [][]string{{
		"set-sysctl net/ipv4/conf/all/arp_ignore=1 (was 0)", "set-sysctl net/ipv4/conf/all/arp_announce=2 (was 0)",
		"set-sysctl net/ipv4/conf/eth0/arp_ignore=1 (was 0)", "set-sysctl net/ipv4/conf/eth0/arp_announce=2 (was 0)",
		"create-link tunl0 type ipip", "add-address 203.0.113.10/32 dev lo", "add-fou gue port 6080", "replace-nft ip/ip6 lvsd",
	}, {
		"set-sysctl net/ipv4/conf/tunl0/rp_filter=0 (was 1)", "set-link-up tunl0",
	}}
	if len(rounds) != len(want) {
		t.Fatalf("rounds %q, want %q", rounds, want)
	}
	for i := range want {
		if !slices.Equal(rounds[i], want[i]) {
			t.Errorf("round %d:\n got %q\nwant %q", i+1, rounds[i], want[i])
		}
	}
	if len(rec.Links) != 1 || rec.Links[0] != (OwnedLink{Name: "tunl0", Kind: "ipip"}) || len(rec.FouPorts) != 1 || !rec.NAT {
		t.Errorf("record %+v: want tunl0 brought up (not created), the port and the tables", rec)
	}
	if l, _ := tun.Link(context.Background(), "tunl0"); !l.Up {
		t.Error("tunl0 is not up")
	}

	// A restart changes nothing.
	if again := planFor(t, h, d, rec); len(again) > 0 {
		t.Errorf("a second plan: %q", opStrings(again))
	}

	ops, err := Cleanup(context.Background(), h, t.TempDir()) // an empty record on disk: nothing
	if err != nil || len(ops) > 0 {
		t.Errorf("cleanup with an empty record: %q, %v", opStrings(ops), err)
	}
	ops = planFor(t, h, Desired{}, rec)
	if err := h.Apply(context.Background(), ops, &rec, func(Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	wantCleanup := []string{"set-link-down tunl0", "delete-address 203.0.113.10/32 dev lo", "delete-fou gue port 6080", "remove-nft ip/ip6 lvsd",
		"restore-sysctl net/ipv4/conf/all/arp_ignore=0", "restore-sysctl net/ipv4/conf/all/arp_announce=0",
		"restore-sysctl net/ipv4/conf/eth0/arp_ignore=0", "restore-sysctl net/ipv4/conf/eth0/arp_announce=0",
		"restore-sysctl net/ipv4/conf/tunl0/rp_filter=1"}
	if got := opStrings(ops); !slices.Equal(got, wantCleanup) {
		t.Errorf("cleanup:\n got %q\nwant %q", got, wantCleanup)
	}
	if l, _ := tun.Link(context.Background(), "tunl0"); l.Up {
		t.Error("tunl0 still up after cleanup")
	}
	if ports, _ := tun.FouPorts(context.Background()); len(ports) > 0 {
		t.Errorf("GUE ports left: %v", ports)
	}
	if _, ok := nft.Current(); ok {
		t.Error("nftables tables left")
	}
	if len(rec.Links)+len(rec.FouPorts)+len(rec.Addresses)+len(rec.Sysctls) > 0 || rec.NAT {
		t.Errorf("record not empty after cleanup: %+v", rec)
	}
}

// What was there before lvsd stays: a device already up, a port already
// open. A device lvsd had to create (a namespace without fallback devices)
// is deleted by cleanup.
func TestTunnelAdoptsAndCreates(t *testing.T) {
	h, tun, _ := tunnelHost(t)
	ctx := context.Background()
	if _, err := tun.CreateLink(ctx, "tunl0", arp.KindIPIP); err != nil {
		t.Fatal(err)
	}
	if err := tun.SetUp(ctx, "tunl0", true); err != nil {
		t.Fatal(err)
	}
	if err := tun.AddFouPort(ctx, arp.FouPort{Port: 6080}); err != nil {
		t.Fatal(err)
	}
	h.Sysctls.(*sysctl.Fake).AddInterface("tunl0")
	rs := tunnelConfig(config.EncapGUE, "203.0.113.10", "2001:db8::10")
	rs.Tunnel.ClampMSS = false
	d := build(rs, nil)
	var rec Record
	rounds := reconcileOnce(t, h, d, &rec)
	if len(rounds) != 2 || slices.ContainsFunc(rounds[0], func(op string) bool {
		return strings.Contains(op, "tunl0") || strings.Contains(op, "fou") || strings.Contains(op, "nft")
	}) {
		t.Errorf("rounds %q: tunl0 up and the port open already, no clamp wanted", rounds)
	}
	if len(rec.Links) != 1 || rec.Links[0].Name != "ip6tnl0" || len(rec.FouPorts) > 0 {
		t.Errorf("record %+v: want only ip6tnl0", rec)
	}
	// ip6tnl0 as a namespace without fallback devices has it: made by lvsd.
	rec.Links[0].Created = true
	ops := planFor(t, h, Desired{}, rec)
	if got := opStrings(ops); !slices.Contains(got, "delete-link ip6tnl0") || slices.ContainsFunc(got, func(op string) bool {
		return strings.Contains(op, "tunl0") && !strings.Contains(op, "ip6tnl0") || strings.Contains(op, "fou")
	}) {
		t.Errorf("cleanup %q: want ip6tnl0 deleted, tunl0 and the port left alone", got)
	}
}

// A crash between recording a device as created and creating it leaves an
// entry that claims too much: when the kernel then reports the module's
// fallback device, the entry goes, so cleanup never deletes that device.
func TestTunnelCrashBeforeCreate(t *testing.T) {
	h, _, _ := tunnelHost(t)
	rs := tunnelConfig(config.EncapIPIP, "203.0.113.10")
	rs.Tunnel.ClampMSS = false
	d := build(rs, nil)
	rec := Record{Links: []OwnedLink{{Name: "tunl0", Kind: arp.KindIPIP, Created: true}}}
	reconcileOnce(t, h, d, &rec)
	if len(rec.Links) != 1 || rec.Links[0].Created {
		t.Errorf("record %+v: want tunl0 only as brought up", rec.Links)
	}
	if got := opStrings(planFor(t, h, Desired{}, rec)); !slices.Contains(got, "set-link-down tunl0") || slices.Contains(got, "delete-link tunl0") {
		t.Errorf("cleanup %q: want tunl0 taken down, not deleted", got)
	}
}
