package agent

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

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

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

func fullnatRuleset(t *testing.T, vips ...string) nat.Ruleset {
	t.Helper()
	var spec nat.Spec
	for _, v := range vips {
		spec.SNAT = append(spec.SNAT, nat.SNATRule{
			Match:  nat.Match{VIP: netip.MustParseAddr(v), Protocol: l4.TCP, Ports: []l4.PortRange{{From: 7001, To: 7002}}},
			CtMark: planner.FirewallMark("fullnat" + v), Comment: "fullnat " + v,
			To: []netip.Addr{netip.MustParseAddr("10.0.0.70"), netip.MustParseAddr("10.0.0.71")},
		})
	}
	rs, err := nat.Render(spec)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func host(s string) netip.Prefix { return netip.PrefixFrom(netip.MustParseAddr(s), 32) }

// takeoverOf plans taking vips (with their addresses) on an empty eth0.
func takeoverOf(rs nat.Ruleset, vips ...planner.VIPAddresses) []planner.Op {
	held := map[netip.Addr]bool{}
	for _, v := range vips {
		held[v.VIP] = true
	}
	return planner.PlanAddresses(planner.AddressInput{Interface: "eth0", VIPs: vips, Held: held, Ruleset: rs, Restore: true, Announce: true, Release: true})
}

var (
	drVIP      = planner.VIPAddresses{VIP: netip.MustParseAddr("10.0.0.50"), Addresses: []netip.Prefix{host("10.0.0.50")}}
	fullnatVIP = planner.VIPAddresses{VIP: netip.MustParseAddr("10.0.0.52"), Addresses: []netip.Prefix{host("10.0.0.52"), host("10.0.0.70"), host("10.0.0.71")}}
)

// A takeover restores the FULLNAT connections once, then adds the
// addresses, then announces them; a release deletes them, then tells the
// relay.
func TestPlanAddressesTakeoverAndRelease(t *testing.T) {
	rs := fullnatRuleset(t, "10.0.0.52")
	want := []string{
		"restore-conntrack [10.0.0.52] (before the addresses)",
		"add-address 10.0.0.50/32 dev eth0 (VIP held)",
		"add-address 10.0.0.52/32 dev eth0 (VIP held)",
		"add-address 10.0.0.70/32 dev eth0 (VIP held)",
		"add-address 10.0.0.71/32 dev eth0 (VIP held)",
		"announce 10.0.0.50/32 dev eth0",
		"announce 10.0.0.52/32 dev eth0",
		"announce 10.0.0.70/32 dev eth0",
		"announce 10.0.0.71/32 dev eth0",
	}
	if got := planner.OpStrings(takeoverOf(rs, drVIP, fullnatVIP)); !slices.Equal(got, want) {
		t.Errorf("takeover:\n got %q\nwant %q", got, want)
	}
	var owned planner.Ownership
	for _, p := range planner.Addresses([]planner.VIPAddresses{drVIP, fullnatVIP}) {
		owned.Addresses = append(owned.Addresses, planner.OwnedAddress{Interface: "eth0", Prefix: p})
	}
	release := planner.PlanAddresses(planner.AddressInput{Interface: "eth0", VIPs: []planner.VIPAddresses{drVIP, fullnatVIP},
		Held: map[netip.Addr]bool{drVIP.VIP: true}, Present: map[string][]netip.Prefix{"eth0": planner.Addresses([]planner.VIPAddresses{drVIP, fullnatVIP})}, Owned: owned,
		Ruleset: rs, Restore: true, Announce: true, Release: true})
	want = []string{
		"delete-address 10.0.0.52/32 dev eth0 (not held)",
		"delete-address 10.0.0.70/32 dev eth0 (not held)",
		"delete-address 10.0.0.71/32 dev eth0 (not held)",
		"release-connections [10.0.0.52] (held elsewhere now)",
	}
	if got := planner.OpStrings(release); !slices.Equal(got, want) {
		t.Errorf("release:\n got %q\nwant %q", got, want)
	}
	// Without a connection-sync relay, conntrack writer or announcer the
	// plan has no such steps.
	bare := planner.PlanAddresses(planner.AddressInput{Interface: "eth0", VIPs: []planner.VIPAddresses{fullnatVIP}, Held: map[netip.Addr]bool{fullnatVIP.VIP: true}, Ruleset: rs})
	if slices.ContainsFunc(bare, func(o planner.Op) bool { return o.Kind != planner.AddAddress }) {
		t.Errorf("bare takeover: %q", planner.OpStrings(bare))
	}
}

// Addresses still in use (a draining or foreign service on the VIP) and
// addresses lvsd does not own are never removed.
func TestPlanAddressesKeepsWhatIsNotItsToRemove(t *testing.T) {
	var owned planner.Ownership
	owned.Addresses = append(owned.Addresses, planner.OwnedAddress{Interface: "eth0", Prefix: host("10.0.0.50")})
	present := map[string][]netip.Prefix{"eth0": {host("10.0.0.50"), host("10.0.0.99")}}
	in := planner.AddressInput{Interface: "eth0", VIPs: []planner.VIPAddresses{drVIP}, Held: map[netip.Addr]bool{}, Present: present, Owned: owned,
		InUse: map[netip.Addr]bool{drVIP.VIP: true}}
	if ops := planner.PlanAddresses(in); len(ops) != 0 {
		t.Errorf("in use: %q", planner.OpStrings(ops))
	}
	in.InUse = nil
	if got := planner.OpStrings(planner.PlanAddresses(in)); !slices.Equal(got, []string{"delete-address 10.0.0.50/32 dev eth0 (not held)"}) {
		t.Errorf("not held: %q (10.0.0.99 is not lvsd's)", got)
	}
}

// The restore runs before the addresses arrive, from one read of the
// connection table, with the connections the FULLNAT rules cover.
func TestRestoreConntrackBeforeAdding(t *testing.T) {
	ctx := context.Background()
	ap := netip.MustParseAddrPort
	conns := &ipvs.ConnFake{}
	conns.Set([]ipvs.Connection{
		{Protocol: l4.TCP, Client: ap("10.0.0.102:40001"), Virtual: ap("10.0.0.52:7001"), Dest: ap("10.0.0.2:7001"), State: "ESTABLISHED", Expires: 900 * time.Second},
		{Protocol: l4.TCP, Client: ap("10.0.0.102:40002"), Virtual: ap("10.0.0.52:7002"), Dest: ap("10.0.0.3:7002"), State: "CLOSE_WAIT", Expires: 60 * time.Second},
		{Protocol: l4.TCP, Client: ap("10.0.0.102:40003"), Virtual: ap("10.0.0.52:7001"), Dest: ap("10.0.0.2:7001"), State: "SYN_RECV", Expires: 50 * time.Second},
		{Protocol: l4.TCP, Client: ap("10.0.0.102:40004"), Virtual: ap("10.0.0.52:8000"), Dest: ap("10.0.0.2:8000"), State: "ESTABLISHED"}, // no FULLNAT rule
		{Protocol: l4.TCP, Client: ap("10.0.0.101:40005"), Virtual: ap("10.0.0.50:7001"), Dest: ap("10.0.0.2:7001"), State: "ESTABLISHED"}, // a DR VIP
		{Protocol: 0, Client: ap("10.0.0.102:0"), Virtual: ap("10.0.0.52:0"), Dest: ap("10.0.0.2:0"), State: "NONE"},                       // a template
	}, nil)
	ct := &nat.ConntrackFake{}
	var logs bytes.Buffer
	order := &addOrder{Addresses: arp.NewFake("eth0"), ct: ct, restores: map[netip.Addr]int{}}
	k := Kernel{Conns: conns, Conntrack: ct, Addrs: order, Announcer: &arp.FakeAnnouncer{},
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ops := takeoverOf(fullnatRuleset(t, "10.0.0.52"), drVIP, fullnatVIP)
	if err := errors.Join(k.Apply(ctx, ops)...); err != nil {
		t.Fatal(err)
	}
	mark := planner.FirewallMark("fullnat10.0.0.52")
	want := []nat.ConntrackEntry{
		{Protocol: l4.TCP, Client: ap("10.0.0.102:40001"), VIP: ap("10.0.0.52:7001"), Backend: ap("10.0.0.2:7001"),
			SNATFrom: netip.MustParseAddr("10.0.0.70"), SNATTo: netip.MustParseAddr("10.0.0.71"), Mark: mark, Timeout: 900 * time.Second},
		{Protocol: l4.TCP, Client: ap("10.0.0.102:40002"), VIP: ap("10.0.0.52:7002"), Backend: ap("10.0.0.3:7002"),
			SNATFrom: netip.MustParseAddr("10.0.0.70"), SNATTo: netip.MustParseAddr("10.0.0.71"), Mark: mark, Timeout: 60 * time.Second},
	}
	if got := ct.Entries(); !slices.Equal(got, want) {
		t.Errorf("restored\n%v\nwant\n%v", got, want)
	}
	for _, a := range []string{"10.0.0.52", "10.0.0.70", "10.0.0.71"} {
		if order.restores[netip.MustParseAddr(a)] != 1 {
			t.Errorf("%s added after %d restores, want 1: state before the address", a, order.restores[netip.MustParseAddr(a)])
		}
	}
	if ct.Calls() != 1 || conns.Calls() != 1 {
		t.Errorf("%d restores, %d table reads; want one each: the VIP and its SNAT addresses restore once", ct.Calls(), conns.Calls())
	}
	if l := logs.String(); !strings.Contains(l, `msg="restored FULLNAT conntrack entries before taking the addresses" vips=[10.0.0.52] connections=2 created=2 existing=0 failed=0 skipped=1`) {
		t.Errorf("log:\n%s", l)
	}
}

// A restore that fails never holds the addresses back.
func TestRestoreFailuresDoNotHoldTheAddressesBack(t *testing.T) {
	for _, c := range []struct {
		name     string
		connsErr error
		ctErr    error
		want     string
	}{
		{"connection table", errors.New("no /proc/net/ip_vs_conn"), nil, "reading the IPVS connection table"},
		{"conntrack", nil, nat.ErrFakeConntrack, "restoring FULLNAT conntrack entries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conns := &ipvs.ConnFake{}
			conns.Set([]ipvs.Connection{{Protocol: l4.TCP, Client: netip.MustParseAddrPort("10.0.0.102:40001"),
				Virtual: netip.MustParseAddrPort("10.0.0.52:7001"), Dest: netip.MustParseAddrPort("10.0.0.2:7001"), State: "ESTABLISHED"}}, c.connsErr)
			ct := &nat.ConntrackFake{}
			ct.FailWith(c.ctErr)
			addrs := arp.NewFake("eth0")
			k := Kernel{Conns: conns, Conntrack: ct, Addrs: addrs}
			ops := takeoverOf(fullnatRuleset(t, "10.0.0.52"), fullnatVIP)
			errs := k.Apply(context.Background(), ops)
			if ops[0].Kind != planner.RestoreConntrack || errs[0] == nil || !strings.Contains(errs[0].Error(), c.want) {
				t.Errorf("restore: %v, want an error saying %q", errs[0], c.want)
			}
			if err := errors.Join(errs[1:]...); err != nil {
				t.Errorf("the addresses failed with the restore: %v", err)
			}
			if got, _ := addrs.List(context.Background(), "eth0"); len(got) != 3 {
				t.Errorf("addresses %v", got)
			}
		})
	}
}
