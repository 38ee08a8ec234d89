package planner

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/lvsd/lvsd/cluster/bgp/route"
)

// The announcement decision, one case per reason a VIP is or is not
// announced: held, an eligible backend (or without_backends announce), not
// drained (or drain deprefer), not stopping.
func TestAnnounceDecision(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.10")
	ready := route.Route{Prefix: netip.PrefixFrom(vip, 32), Communities: []route.Community{65001<<16 | 100}}
	med := uint32(1000)
	depreferred := ready
	depreferred.MED, depreferred.ASPathPrepend = &med, 3
	for _, c := range []struct {
		name                        string
		policy                      AnnouncePolicy
		eligible, drained, stopping bool
		want                        *route.Route
	}{
		{"ready", AnnouncePolicy{}, true, false, false, &ready},
		{"no eligible backend", AnnouncePolicy{}, false, false, false, nil},
		{"no eligible backend, without_backends announce", AnnouncePolicy{WithoutBackends: true}, false, false, false, &ready},
		{"drained", AnnouncePolicy{}, true, true, false, nil},
		{"drained, deprefer", AnnouncePolicy{Deprefer: true, DrainMED: 1000, DrainPrepend: 3}, true, true, false, &depreferred},
		{"stopping", AnnouncePolicy{WithoutBackends: true, Deprefer: true}, true, false, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.policy.Routes = map[netip.Addr]route.Route{vip: ready}
			got, ok := c.policy.Route(vip, c.eligible, c.drained, c.stopping)
			if ok != (c.want != nil) || ok && !sameRoute(got, *c.want) {
				t.Errorf("route %v, announced %v; want %v", got, ok, c.want)
			}
		})
	}
}

// With BGP a VIP goes on lo and is announced to the routers after its
// address is added (no gratuitous ARP: nobody on the link may answer for
// it); losing it withdraws the route before the address goes.
func TestPlanAddressesRoutes(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.10")
	p := netip.PrefixFrom(vip, 32)
	v := VIPAddresses{VIP: vip, Addresses: []netip.Prefix{p}}
	policy := &AnnouncePolicy{Routes: map[netip.Addr]route.Route{vip: {Prefix: p}}}
	in := AddressInput{Interface: "eth0", VIPDevice: "lo", VIPs: []VIPAddresses{v}, Held: map[netip.Addr]bool{vip: true},
		Routes: policy, Eligible: map[netip.Addr]bool{vip: true}, Announce: true}
	want := []string{"add-address 192.0.2.10/32 dev lo (VIP held)", "announce-route 192.0.2.10/32"}
	if got := OpStrings(PlanAddresses(in)); !slices.Equal(got, want) {
		t.Errorf("takeover:\n got %q\nwant %q", got, want)
	}
	var owned Ownership
	owned.Addresses = append(owned.Addresses, OwnedAddress{"lo", p})
	in.Owned, in.Present = owned, map[string][]netip.Prefix{"lo": {p}}
	in.Announced = map[netip.Prefix]route.Route{p: {Prefix: p}}
	if ops := PlanAddresses(in); len(ops) != 0 {
		t.Errorf("steady: %q", OpStrings(ops))
	}
	in.Eligible = nil // the last backend went
	if got := OpStrings(PlanAddresses(in)); !slices.Equal(got, []string{"withdraw-route 192.0.2.10/32 (no eligible backend)"}) {
		t.Errorf("no backend: %q; the address stays, the route goes", got)
	}
	in.Eligible, in.Held = map[netip.Addr]bool{vip: true}, map[netip.Addr]bool{}
	want = []string{"withdraw-route 192.0.2.10/32 (not held)", "delete-address 192.0.2.10/32 dev lo (not held)"}
	if got := OpStrings(PlanAddresses(in)); !slices.Equal(got, want) {
		t.Errorf("release:\n got %q\nwant %q", got, want)
	}
	// Changed attributes re-announce.
	in.Held = map[netip.Addr]bool{vip: true}
	med := uint32(5)
	policy.Routes[vip] = route.Route{Prefix: p, MED: &med}
	if got := OpStrings(PlanAddresses(in)); !slices.Equal(got, []string{"announce-route 192.0.2.10/32 med 5"}) {
		t.Errorf("changed attributes: %q", got)
	}
}

// Under ECMP with FULLNAT a VIP is announced only while this director
// holds its own source addresses, which go on the interface with a
// gratuitous ARP and are never announced over BGP; another director's,
// taken over, likewise.
func TestPlanAddressesOwnSourceAddresses(t *testing.T) {
	vip, own, other := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("10.0.0.201"), netip.MustParseAddr("10.0.0.202")
	host := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, 32) }
	policy := &AnnouncePolicy{Routes: map[netip.Addr]route.Route{vip: {Prefix: host(vip)}}}
	in := AddressInput{Interface: "eth0", VIPDevice: "lo", Routes: policy, Eligible: map[netip.Addr]bool{vip: true}, Announce: true,
		VIPs: []VIPAddresses{
			{VIP: own, Addresses: []netip.Prefix{host(own)}, Home: "d1"},
			{VIP: other, Addresses: []netip.Prefix{host(other)}, Home: "d2"},
			{VIP: vip, Addresses: []netip.Prefix{host(vip)}, Needs: []netip.Addr{own}},
		},
		Held: map[netip.Addr]bool{vip: true}}
	if got := OpStrings(PlanAddresses(in)); !slices.Equal(got, []string{"add-address 192.0.2.10/32 dev lo (VIP held)"}) {
		t.Errorf("own source addresses not held: %q, want the VIP programmed but not announced", got)
	}
	in.Held[own], in.Held[other] = true, true
	want := []string{"add-address 10.0.0.201/32 dev eth0 (VIP held)", "add-address 10.0.0.202/32 dev eth0 (VIP held)",
		"add-address 192.0.2.10/32 dev lo (VIP held)", "announce 10.0.0.201/32 dev eth0", "announce 10.0.0.202/32 dev eth0",
		"announce-route 192.0.2.10/32"}
	if got := OpStrings(PlanAddresses(in)); !slices.Equal(got, want) {
		t.Errorf("held:\n got %q\nwant %q", got, want)
	}
	in.Announced = map[netip.Prefix]route.Route{host(vip): {Prefix: host(vip)}}
	delete(in.Held, own)
	if got := OpStrings(PlanAddresses(in)); !slices.Contains(got, "withdraw-route 192.0.2.10/32 (own source addresses not held)") {
		t.Errorf("own source addresses lost: %q, want the route withdrawn", got)
	}
}
