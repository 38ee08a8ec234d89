package planner

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/cluster/bgp/route"
	nat "github.com/lvsd/lvsd/nat/rules"
)

// AddressInput is everything the VIP holder's plan depends on.
type AddressInput struct {
	// Interface takes the addresses moving with the VIPs (FULLNAT source
	// addresses, NAT gateways), and the VIPs unless VIPDevice says
	// otherwise ("": Interface), but for those a VIP puts on an interface
	// of its own (VIPAddresses.Interfaces).
	Interface, VIPDevice string
	// VIPs are the VIPs whose data plane is programmed, with the addresses
	// that move with each (Desired.VIPs).
	VIPs []VIPAddresses
	// Held are the VIPs this director holds now (all of them without a
	// cluster).
	Held map[netip.Addr]bool
	// Present are the addresses on each device now.
	Present map[string][]netip.Prefix
	Owned   Ownership // its Addresses
	// InUse are addresses to keep even when no held VIP wants them
	// (AddressesInUse).
	InUse map[netip.Addr]bool
	// Ruleset is the nftables ruleset in force: which VIPs are FULLNAT.
	Ruleset nat.Ruleset
	// Restore, Announce and Release say whether this director restores
	// FULLNAT conntrack entries, announces added addresses on the link, and
	// tells a connection-sync relay about released VIPs.
	Restore, Announce, Release bool
	// Routes, with BGP, is how the VIPs are announced; Announced what is
	// announced now; Eligible the VIPs with an eligible backend; Drained and
	// Stopping the director's own state.
	Routes            *AnnouncePolicy
	Announced         map[netip.Prefix]route.Route
	Eligible          map[netip.Addr]bool
	Drained, Stopping bool
}

// device is where address p goes: the interface its VIP names for it, lo
// for a VIP under BGP (VIPDevice), else Interface.
func (in AddressInput) device(p netip.Prefix, isVIP map[netip.Addr]bool, named map[netip.Prefix]string) string {
	if dev, ok := named[p]; ok {
		return dev
	}
	if isVIP[p.Addr()] && in.VIPDevice != "" {
		return in.VIPDevice
	}
	return in.Interface
}

// PlanAddresses returns the ops that give this director the addresses of
// the VIPs it holds, announce them, and take away the others it owns, as
// two ordered sequences (docs/architecture.md, "What happens on takeover"):
//
//   - release: withdraw the routes of VIPs no longer held (BGP), delete
//     each address no held VIP needs, then tell the relay
//     (release-connections) that the VIPs' connections are the new holder's;
//   - takeover: restore the FULLNAT conntrack entries of the VIPs taken (one
//     read of the connection table for all), add the addresses, then
//     announce them — on the link (gratuitous ARP, neighbour advertisement)
//     or to the routers (BGP) — state first, announcement last, so the first
//     packet sent here finds the connection.
//
// A route also goes when its VIP loses its last eligible backend, the
// director is drained or stops, and comes back when that ends. Only
// addresses in the ownership record are removed, and never one in
// in.InUse. It is pure.
func PlanAddresses(in AddressInput) []Op {
	isVIP := make(map[netip.Addr]bool, len(in.VIPs))
	want := map[netip.Prefix]bool{}
	named := map[netip.Prefix]string{} // the configuration checks an address goes on one interface
	for _, v := range in.VIPs {
		isVIP[v.VIP] = v.Home == "" // a director's source addresses go on the interface
		maps.Copy(named, v.Interfaces)
		if in.Held[v.VIP] {
			for _, p := range v.Addresses {
				want[p] = true
			}
		}
	}
	present := map[OwnedAddress]bool{}
	for dev, ps := range in.Present {
		for _, p := range ps {
			present[OwnedAddress{dev, p}] = true
		}
	}
	announce, withdraw := planRoutes(in)
	var release, takeover, gratuitous []Op
	var released, restored []netip.Addr
	for _, o := range in.Owned.Addresses {
		dev := in.device(o.Prefix, isVIP, named)
		here := o.Interface == dev
		if here && want[o.Prefix] || in.InUse[o.Prefix.Addr()] || here && !present[o] {
			continue
		}
		// Owned addresses on other devices (the interface setting changed)
		// are not listed; deleting a missing one succeeds.
		release = append(release, Op{Kind: DeleteAddress, Reason: "not held", Detail: &Detail{Interface: o.Interface, Address: o.Prefix}})
		if isVIP[o.Prefix.Addr()] {
			released = append(released, o.Prefix.Addr())
		}
	}
	for _, p := range sortedPrefixes(want) {
		dev := in.device(p, isVIP, named)
		if present[OwnedAddress{dev, p}] {
			continue
		}
		takeover = append(takeover, Op{Kind: AddAddress, Reason: "VIP held", Detail: &Detail{Interface: dev, Address: p}})
		// Announced on the link it went on; one on lo (BGP) is routed.
		if in.Announce && dev != Loopback {
			gratuitous = append(gratuitous, Op{Kind: Announce, Detail: &Detail{Interface: dev, Address: p}})
		}
		if in.Restore {
			restored = append(restored, in.Ruleset.FullNATVIPs(p.Addr())...)
		}
	}
	ops := withdraw
	ops = append(ops, release...)
	if in.Release && len(released) > 0 {
		ops = append(ops, Op{Kind: ReleaseConnections, Reason: "held elsewhere now", Detail: &Detail{VIPs: sortedAddrs(released)}})
	}
	if len(restored) > 0 {
		ops = append(ops, Op{Kind: RestoreConntrack, Reason: "before the addresses", Detail: &Detail{VIPs: sortedAddrs(restored), NAT: in.Ruleset}})
	}
	ops = append(ops, takeover...)
	ops = append(ops, gratuitous...)
	return append(ops, announce...)
}

// planRoutes compares the routes the VIPs should have with what is
// announced: routes to announce (new or changed), routes to withdraw.
func planRoutes(in AddressInput) (announce, withdraw []Op) {
	if in.Routes == nil {
		return nil, nil
	}
	want := map[netip.Prefix]route.Route{}
	for _, v := range in.VIPs {
		if !in.Held[v.VIP] || v.Home != "" || !in.holdsAll(v.Needs) {
			continue
		}
		if r, ok := in.Routes.Route(v.VIP, in.Eligible[v.VIP], in.Drained, in.Stopping); ok {
			want[r.Prefix] = r
		}
	}
	for _, p := range sortedRoutePrefixes(in.Announced) {
		if _, ok := want[p]; !ok {
			withdraw = append(withdraw, Op{Kind: WithdrawRoute, Reason: withdrawReason(in, p.Addr()), Detail: &Detail{Route: route.Route{Prefix: p}}})
		}
	}
	for _, p := range sortedRoutePrefixes(want) {
		if cur, ok := in.Announced[p]; !ok || !sameRoute(cur, want[p]) {
			announce = append(announce, Op{Kind: AnnounceRoute, Detail: &Detail{Route: want[p]}})
		}
	}
	return announce, withdraw
}

// withdrawReason says why vip's route goes, for logs and lvsd plan.
func withdrawReason(in AddressInput, vip netip.Addr) string {
	switch {
	case in.Stopping:
		return "stopping"
	case !in.Held[vip]:
		return "not held"
	case !in.holdsAll(in.needs(vip)):
		return "own source addresses not held"
	case in.Drained:
		return "director drained"
	case !in.Eligible[vip]:
		return "no eligible backend"
	}
	return "no longer configured"
}

// holdsAll reports whether every one of keys is held.
func (in AddressInput) holdsAll(keys []netip.Addr) bool {
	for _, k := range keys {
		if !in.Held[k] {
			return false
		}
	}
	return true
}

// needs are the source addresses vip's announcement waits for.
func (in AddressInput) needs(vip netip.Addr) []netip.Addr {
	for _, v := range in.VIPs {
		if v.VIP == vip {
			return v.Needs
		}
	}
	return nil
}

func sameRoute(a, b route.Route) bool {
	medEqual := a.MED == nil && b.MED == nil || a.MED != nil && b.MED != nil && *a.MED == *b.MED
	return a.Prefix == b.Prefix && a.NextHop == b.NextHop && slices.Equal(a.Communities, b.Communities) &&
		slices.Equal(a.LargeCommunities, b.LargeCommunities) && a.LocalPref == b.LocalPref && medEqual &&
		a.ASPathPrepend == b.ASPathPrepend
}

func sortedRoutePrefixes(m map[netip.Prefix]route.Route) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

func sortedPrefixes(set map[netip.Prefix]bool) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

func sortedAddrs(a []netip.Addr) []netip.Addr {
	out := slices.Clone(a)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
