package realserver

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/nat"
)

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
func reconcileOnce(t *testing.T, h Host, d planner.RealServerDesired, rec *Record) [][]string {
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
		"create-link tunl0 type ipip", "add-address 203.0.113.10/32 dev lo", "add-fou gue port 6080", "replace-nft-tables ip/ip6 lvsd (ruleset " + d.Tunnel.NAT.Digest() + ")",
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
	if len(rec.Links) != 1 || rec.Links[0] != (planner.OwnedLink{Name: "tunl0", Kind: "ipip"}) || len(rec.FouPorts) != 1 || !rec.NAT {
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
	ops = planFor(t, h, planner.RealServerDesired{}, rec)
	if err := h.Apply(context.Background(), ops, &rec, func(Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	wantCleanup := []string{"set-link-down tunl0", "delete-address 203.0.113.10/32 dev lo", "delete-fou gue port 6080", "remove-nft-tables ip/ip6 lvsd",
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
	ops := planFor(t, h, planner.RealServerDesired{}, rec)
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
	rec := Record{Ownership: planner.Ownership{Links: []planner.OwnedLink{{Name: "tunl0", Kind: arp.KindIPIP, Created: true}}}}
	reconcileOnce(t, h, d, &rec)
	if len(rec.Links) != 1 || rec.Links[0].Created {
		t.Errorf("record %+v: want tunl0 only as brought up", rec.Links)
	}
	if got := opStrings(planFor(t, h, planner.RealServerDesired{}, rec)); !slices.Contains(got, "set-link-down tunl0") || slices.Contains(got, "delete-link tunl0") {
		t.Errorf("cleanup %q: want tunl0 taken down, not deleted", got)
	}
}
