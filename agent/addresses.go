package agent

import (
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/nat"
)

// AddressInput is everything the VIP holder's plan depends on.
type AddressInput struct {
	Interface string
	// VIPs are the VIPs whose data plane is programmed, with the addresses
	// that move with each (Desired.VIPs).
	VIPs []VIPAddresses
	// Held are the VIPs this director holds now (all of them without a
	// cluster).
	Held map[netip.Addr]bool
	// Present are the addresses on Interface now.
	Present []netip.Prefix
	Owned   Ownership // its Addresses
	// InUse are addresses to keep even when no held VIP wants them
	// (AddressesInUse).
	InUse map[netip.Addr]bool
	// Ruleset is the nftables ruleset in force: which VIPs are FULLNAT.
	Ruleset nat.Ruleset
	// Restore, Announce and Release say whether this director restores
	// FULLNAT conntrack entries, announces added addresses, and tells a
	// connection-sync relay about released VIPs.
	Restore, Announce, Release bool
}

// PlanAddresses returns the ops that give this director the addresses of
// the VIPs it holds and take away the others it owns, as two ordered
// sequences (docs/architecture.md, "What happens on takeover"):
//
//   - release: delete each address no held VIP needs, then tell the relay
//     (release-connections) that the VIPs' connections are the new holder's;
//   - takeover: restore the FULLNAT conntrack entries of the VIPs taken (one
//     read of the connection table for all), add the addresses, then
//     announce them — state first, announcement last, so the first packet a
//     client's switch sends here finds the connection.
//
// Only addresses in the ownership record are removed, and never one in
// in.InUse. It is pure.
func PlanAddresses(in AddressInput) []Op {
	want := map[netip.Prefix]bool{}
	isVIP := make(map[netip.Addr]bool, len(in.VIPs))
	for _, v := range in.VIPs {
		isVIP[v.VIP] = true
		if in.Held[v.VIP] {
			for _, p := range v.Addresses {
				want[p] = true
			}
		}
	}
	present := make(map[netip.Prefix]bool, len(in.Present))
	for _, p := range in.Present {
		present[p] = true
	}
	var release, takeover, announce []Op
	var released, restored []netip.Addr
	for _, o := range in.Owned.Addresses {
		onIface := o.Interface == in.Interface
		if onIface && want[o.Prefix] || in.InUse[o.Prefix.Addr()] || onIface && !present[o.Prefix] {
			continue
		}
		// Owned addresses on other interfaces (the interface setting
		// changed) are not listed; deleting a missing one succeeds.
		release = append(release, Op{Kind: DeleteAddress, Interface: o.Interface, Address: o.Prefix, Reason: "not held"})
		if isVIP[o.Prefix.Addr()] {
			released = append(released, o.Prefix.Addr())
		}
	}
	for _, p := range sortedPrefixes(want) {
		if present[p] {
			continue
		}
		takeover = append(takeover, Op{Kind: AddAddress, Interface: in.Interface, Address: p, Reason: "VIP held"})
		if in.Announce {
			announce = append(announce, Op{Kind: Announce, Interface: in.Interface, Address: p})
		}
		if in.Restore {
			restored = append(restored, in.Ruleset.FullNATVIPs(p.Addr())...)
		}
	}
	var ops []Op
	ops = append(ops, release...)
	if in.Release && len(released) > 0 {
		ops = append(ops, Op{Kind: ReleaseConnections, VIPs: sortedAddrs(released), Reason: "held elsewhere now"})
	}
	if len(restored) > 0 {
		ops = append(ops, Op{Kind: RestoreConntrack, VIPs: sortedAddrs(restored), NAT: in.Ruleset, Reason: "before the addresses"})
	}
	ops = append(ops, takeover...)
	return append(ops, announce...)
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
