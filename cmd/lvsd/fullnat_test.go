package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// The fakes a real director's kernel combines: IPVS with its connection
// table, nftables with the conntrack writer.
type fakeIPVS struct {
	*ipvs.Fake
	*ipvs.ConnFake
}

type fakeNAT struct {
	*nat.Fake
	*nat.ConntrackFake
}

// addOrder records how many restores had run when each address was added.
type addOrder struct {
	arp.Addresses
	ct       *nat.ConntrackFake
	restores map[netip.Addr]int
}

func (a *addOrder) Add(ctx context.Context, dev string, p netip.Prefix) error {
	a.restores[p.Addr()] = a.ct.Calls()
	return a.Addresses.Add(ctx, dev, p)
}

func fullnatSpec(vips ...string) nat.Spec {
	var spec nat.Spec
	for _, v := range vips {
		spec.SNAT = append(spec.SNAT, nat.SNATRule{
			Match:  nat.Match{VIP: netip.MustParseAddr(v), Protocol: nat.TCP, Ports: []nat.PortRange{{From: 7001, To: 7002}}},
			CtMark: agent.FirewallMark("fullnat" + v), Comment: "fullnat " + v,
			To: []netip.Addr{netip.MustParseAddr("10.0.0.70"), netip.MustParseAddr("10.0.0.71")},
		})
	}
	return spec
}

func render(t *testing.T, spec nat.Spec) nat.Ruleset {
	t.Helper()
	rs, err := nat.Render(spec)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func host(s string) netip.Prefix { return netip.PrefixFrom(netip.MustParseAddr(s), 32) }

func TestFullNATTakeoverRestoresBeforeAdding(t *testing.T) {
	ctx := context.Background()
	ap := netip.MustParseAddrPort
	conns := &ipvs.ConnFake{}
	conns.Set([]ipvs.Connection{
		{Protocol: ipvs.TCP, Client: ap("10.0.0.102:40001"), Virtual: ap("10.0.0.52:7001"), Dest: ap("10.0.0.2:7001"), State: "ESTABLISHED", Expires: 900 * time.Second},
		{Protocol: ipvs.TCP, Client: ap("10.0.0.102:40002"), Virtual: ap("10.0.0.52:7002"), Dest: ap("10.0.0.3:7002"), State: "CLOSE_WAIT", Expires: 60 * time.Second},
		{Protocol: ipvs.TCP, Client: ap("10.0.0.102:40003"), Virtual: ap("10.0.0.52:7001"), Dest: ap("10.0.0.2:7001"), State: "SYN_RECV", Expires: 50 * time.Second},
		{Protocol: ipvs.TCP, Client: ap("10.0.0.102:40004"), Virtual: ap("10.0.0.52:8000"), Dest: ap("10.0.0.2:8000"), State: "ESTABLISHED"}, // no FULLNAT rule
		{Protocol: ipvs.TCP, Client: ap("10.0.0.101:40005"), Virtual: ap("10.0.0.50:7001"), Dest: ap("10.0.0.2:7001"), State: "ESTABLISHED"}, // a DR VIP
		{Protocol: 0, Client: ap("10.0.0.102:0"), Virtual: ap("10.0.0.52:0"), Dest: ap("10.0.0.2:0"), State: "NONE"},                         // a template
	}, nil)
	ct := &nat.ConntrackFake{}
	k := &agent.Kernel{IPVS: fakeIPVS{ipvs.NewFake(), conns}, NAT: fakeNAT{nat.NewFake(), ct}}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	leases := arp.NewFake("eth0")
	order := &addOrder{Addresses: leases, ct: ct, restores: map[netip.Addr]int{}}
	addrs, natIf := withFullNATRestore(k, render(t, fullnatSpec("10.0.0.52")), order, log)
	now := time.Unix(1e9, 0)
	addrs.(*fullnatTakeover).now = func() time.Time { return now }

	for _, a := range []string{"10.0.0.50", "10.0.0.52", "10.0.0.70", "10.0.0.71"} {
		if err := addrs.Add(ctx, "eth0", host(a)); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := leases.List(ctx, "eth0"); len(got) != 4 {
		t.Errorf("addresses %v, want all four", got)
	}
	mark := agent.FirewallMark("fullnat10.0.0.52")
	want := []nat.ConntrackEntry{
		{Protocol: nat.TCP, Client: ap("10.0.0.102:40001"), VIP: ap("10.0.0.52:7001"), Backend: ap("10.0.0.2:7001"),
			SNATFrom: netip.MustParseAddr("10.0.0.70"), SNATTo: netip.MustParseAddr("10.0.0.71"), Mark: mark, Timeout: 900 * time.Second},
		{Protocol: nat.TCP, Client: ap("10.0.0.102:40002"), VIP: ap("10.0.0.52:7002"), Backend: ap("10.0.0.3:7002"),
			SNATFrom: netip.MustParseAddr("10.0.0.70"), SNATTo: netip.MustParseAddr("10.0.0.71"), Mark: mark, Timeout: 60 * time.Second},
	}
	if got := ct.Entries(); !slices.Equal(got, want) {
		t.Errorf("restored\n%v\nwant\n%v", got, want)
	}
	if order.restores[netip.MustParseAddr("10.0.0.52")] != 1 || order.restores[netip.MustParseAddr("10.0.0.50")] != 0 {
		t.Errorf("restores done when each address was added: %v; want the VIP added after its restore", order.restores)
	}
	if ct.Calls() != 1 || conns.Calls() != 1 {
		t.Errorf("%d restores, %d table reads; want one each: the VIP and its SNAT addresses restore once", ct.Calls(), conns.Calls())
	}
	if l := logs.String(); !strings.Contains(l, `msg="restored FULLNAT conntrack entries before taking the addresses" vips=[10.0.0.52] connections=2 created=2 existing=0 failed=0 skipped=1`) {
		t.Errorf("log:\n%s", l)
	}

	// Losing a SNAT address: the next takeover restores again, and finds
	// the entries there.
	if err := addrs.Delete(ctx, "eth0", host("10.0.0.71")); err != nil {
		t.Fatal(err)
	}
	if err := addrs.Add(ctx, "eth0", host("10.0.0.71")); err != nil {
		t.Fatal(err)
	}
	if ct.Calls() != 2 || len(ct.Entries()) != 2 {
		t.Errorf("after delete and add: %d restores, %d entries", ct.Calls(), len(ct.Entries()))
	}

	// A reload adds a FULLNAT VIP: the ruleset applied says so.
	if err := natIf.Apply(ctx, render(t, fullnatSpec("10.0.0.52", "10.0.0.53"))); err != nil {
		t.Fatal(err)
	}
	conns.Set([]ipvs.Connection{{Protocol: ipvs.UDP, Client: ap("10.0.0.102:5000"), Virtual: ap("10.0.0.53:7001"), Dest: ap("10.0.0.2:7001"), State: "UDP"},
		{Protocol: ipvs.TCP, Client: ap("10.0.0.102:5001"), Virtual: ap("10.0.0.53:7001"), Dest: ap("10.0.0.2:7001"), State: "ESTABLISHED"}}, nil)
	now = now.Add(tableReuse) // a takeover well after the last
	if err := addrs.Add(ctx, "eth0", host("10.0.0.53")); err != nil {
		t.Fatal(err)
	}
	if n := len(ct.Entries()); n != 3 {
		t.Errorf("after the reload: %d entries, want 3 (the rules are tcp only)", n)
	}
	if conns.Calls() != 2 {
		t.Errorf("%d table reads, want 2: one per takeover", conns.Calls())
	}
}

// A restore that fails never holds the address back.
func TestFullNATTakeoverFailuresDoNotFailTheAdd(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		connsErr error
		ctErr    error
		wantLog  string
	}{
		{"connection table", errors.New("no /proc/net/ip_vs_conn"), nil, "reading the IPVS connection table failed"},
		{"conntrack", nil, nat.ErrFakeConntrack, "restoring FULLNAT conntrack entries failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conns := &ipvs.ConnFake{}
			conns.Set([]ipvs.Connection{{Protocol: ipvs.TCP, Client: netip.MustParseAddrPort("10.0.0.102:40001"),
				Virtual: netip.MustParseAddrPort("10.0.0.52:7001"), Dest: netip.MustParseAddrPort("10.0.0.2:7001"), State: "ESTABLISHED"}}, c.connsErr)
			ct := &nat.ConntrackFake{}
			ct.FailWith(c.ctErr)
			k := &agent.Kernel{IPVS: fakeIPVS{ipvs.NewFake(), conns}, NAT: fakeNAT{nat.NewFake(), ct}}
			var logs bytes.Buffer
			leases := arp.NewFake("eth0")
			addrs, _ := withFullNATRestore(k, render(t, fullnatSpec("10.0.0.52")), leases, slog.New(slog.NewTextHandler(&logs, nil)))
			if err := addrs.Add(ctx, "eth0", host("10.0.0.52")); err != nil {
				t.Fatalf("Add failed with the restore: %v", err)
			}
			if got, _ := leases.List(ctx, "eth0"); len(got) != 1 {
				t.Errorf("addresses %v", got)
			}
			if !strings.Contains(logs.String(), c.wantLog) {
				t.Errorf("log lacks %q:\n%s", c.wantLog, logs.String())
			}
		})
	}
}

// Kernels of test fakes without a connection table are left unwrapped.
func TestFullNATTakeoverNeedsBothParts(t *testing.T) {
	k := &agent.Kernel{IPVS: ipvs.NewFake(), NAT: nat.NewFake()}
	leases := arp.NewFake("eth0")
	addrs, n := withFullNATRestore(k, render(t, nat.Spec{}), leases, slog.Default())
	if addrs != arp.Addresses(leases) || n != k.NAT {
		t.Error("wrapped without a connection table and conntrack writer")
	}
}
