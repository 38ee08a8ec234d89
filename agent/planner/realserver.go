package planner

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/agent/config"
	arp "github.com/lvsd/lvsd/arp/spec"
)

// Loopback is the interface that holds the VIPs on a real server.
const Loopback = "lo"

// RealServerSetting is one sysctl a real server needs.
type RealServerSetting struct {
	Key string // arp/spec.ConfKey form: "net/ipv4/conf/all/arp_ignore"
	// Value is written when the current value is not in Accept.
	Value string
	// Accept lists the current values that already do the job (Value is
	// among them): lvsd never replaces a stricter choice of the operator.
	Accept []string
	// Guard settings must be in force before a VIP is added: a VIP on lo
	// without them would answer ARP and pull the VIP's traffic past the
	// director.
	Guard bool
	Why   string // for the log
}

// RealServerDesired is what a real server must have.
type RealServerDesired struct {
	Addresses []netip.Prefix      // on lo, sorted: /32 for IPv4, /128 for IPv6
	Settings  []RealServerSetting // "all" first, the named interfaces in order, then the tunnel devices
	Tunnel    Decapsulation       // zero without tunnel VIPs
}

// RealServerActual is what a real server's host has now.
type RealServerActual struct {
	Loopback []netip.Prefix // the addresses on lo
	// Sysctls holds the current value of every key that was read; a key
	// the host does not have (an interface that does not exist) is absent.
	Sysctls map[string]string
	// Links holds the tunnel devices desired or recorded that exist.
	Links map[string]arp.Link
	// FouPorts are the GUE receive ports (read only when some are desired
	// or recorded).
	FouPorts []arp.FouPort
	// NATDigest is the digest of lvsd's nftables tables, "" when there are
	// none (read only when the MSS clamp is desired or recorded).
	NATDigest string
}

// BuildRealServer returns the desired state of a real server with
// configuration rs holding vips (and the tunnel VIPs of rs). It is pure.
//
// The sysctls, on "all" and each of rs.ARPInterfaces:
//   - arp_ignore=1: answer ARP only for addresses of the interface the
//     request came in on, so never for a VIP on lo. 2 (same, plus the
//     sender must be on-link) and 8 (never answer) are stricter and kept.
//   - arp_announce=2: the source address of the host's own ARP requests is
//     one of the outgoing interface's addresses, never a VIP; otherwise a
//     request sent while answering a client would teach the network "VIP is
//     at this host".
//   - rp_filter: strict (1) becomes loose (2). DR packets carry the client's
//     address as source; when the route back to the client leaves through
//     another interface than the one the director delivered on (a separate
//     return path, a multi-homed server), strict reverse-path filtering
//     drops them. Loose still drops sources with no route at all; 0 and 2
//     are kept as they are. With IPv4 tunnel VIPs "all" and the tunnel
//     device need 0 (tunnelRPFilter).
//
// The kernel takes the maximum of "all" and the interface's own value for
// all three, which is why "all" alone suppresses ARP on every interface
// (the guard), and why relaxing rp_filter needs both "all" and the
// interface.
func BuildRealServer(rs config.RealServer, vips []netip.Addr) (RealServerDesired, error) {
	var d RealServerDesired
	for _, v := range append(slices.Clone(vips), rs.Tunnel.VIPs...) {
		v = v.Unmap()
		p := netip.PrefixFrom(v, v.BitLen())
		if v.IsValid() && !slices.Contains(d.Addresses, p) {
			d.Addresses = append(d.Addresses, p)
		}
	}
	slices.SortFunc(d.Addresses, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	devs := []string{"all"}
	for _, dev := range rs.ARPInterfaces {
		if !slices.Contains(devs, dev) && dev != Loopback {
			devs = append(devs, dev)
		}
	}
	for _, dev := range devs {
		guard := dev == "all"
		d.Settings = append(d.Settings,
			RealServerSetting{Key: arp.ConfKey(dev, "arp_ignore"), Value: "1", Accept: []string{"1", "2", "8"}, Guard: guard,
				Why: "answer ARP only for addresses of the receiving interface (never the VIPs on lo)"},
			RealServerSetting{Key: arp.ConfKey(dev, "arp_announce"), Value: "2", Accept: []string{"2"}, Guard: guard,
				Why: "never use a VIP as the source of ARP requests"},
			RealServerSetting{Key: arp.ConfKey(dev, "rp_filter"), Value: "2", Accept: []string{"0", "2"},
				Why: "loose reverse-path filter: DR replies may leave through another interface"},
		)
	}
	var err error
	if d.Tunnel, err = buildDecapsulation(rs.Tunnel); err != nil {
		return RealServerDesired{}, fmt.Errorf("tunnel: %w", err)
	}
	d.Settings = tunnelRPFilter(d.Settings, d.Tunnel.Links)
	return d, nil
}

// PlanRealServer returns the ops that bring a to d, touching only what
// owned says lvsd added when something is no longer wanted. It is pure.
// Order: sysctls first (ARP suppression before any VIP appears), then
// missing tunnel devices, new VIPs, GUE ports, the MSS clamp, and tunnel
// devices up last (everything they deliver to is in place); then what is
// no longer wanted, tunnel devices first (nothing new arrives), VIPs,
// ports, the clamp, sysctls. A VIP already on lo, at any prefix length, is
// used as it is and does not become lvsd's; nor does a device already up, a
// port already open, or a setting whose current value is acceptable. So a
// second plan right after applying the first is empty, except after
// CreateLink: the device's sysctls and its bringing up wait for the next
// plan, which can read them.
func PlanRealServer(d RealServerDesired, a RealServerActual, owned Ownership) []Op {
	var ops []Op
	wanted := map[string]bool{}
	guardReadable := true
	for _, s := range d.Settings {
		wanted[s.Key] = true
		cur, ok := a.Sysctls[s.Key]
		if !ok {
			// The interface is missing: nothing to write until it appears.
			// Without "all" nothing proves ARP is suppressed.
			guardReadable = guardReadable && !s.Guard
			continue
		}
		if !slices.Contains(s.Accept, cur) {
			ops = append(ops, Op{Kind: SetSysctl, Reason: s.Why, Guard: s.Guard, Detail: &Detail{Key: s.Key, Value: s.Value, Previous: cur}})
		}
	}
	ops = append(ops, createLinks(d, a)...)
	if guardReadable {
		for _, p := range d.Addresses {
			if !Holds(a.Loopback, p.Addr()) {
				ops = append(ops, Op{Kind: AddAddress, Reason: "VIP", Detail: &Detail{Interface: Loopback, Address: p}})
			}
		}
	}
	ops = append(ops, planDecapsulation(d, a)...)
	ops = append(ops, removeLinks(d, a, owned)...)
	for _, o := range owned.Addresses {
		p := o.Prefix
		if Holds(d.Addresses, p.Addr()) {
			continue
		}
		if slices.Contains(a.Loopback, p) {
			ops = append(ops, Op{Kind: DeleteAddress, Reason: "no longer configured", Detail: &Detail{Interface: Loopback, Address: p}})
		} else {
			ops = append(ops, Op{Kind: ForgetAddress, Reason: "removed by someone else", Detail: &Detail{Interface: Loopback, Address: p}})
		}
	}
	ops = append(ops, removeDecapsulation(d, a, owned)...)
	for _, s := range owned.Sysctls {
		if wanted[s.Key] {
			continue
		}
		cur, ok := a.Sysctls[s.Key]
		switch {
		case !ok:
			ops = append(ops, Op{Kind: ForgetSysctl, Reason: "the key is gone (interface deleted)", Detail: &Detail{Key: s.Key}})
		case cur == s.Value:
			ops = append(ops, Op{Kind: RestoreSysctl, Reason: "no longer needed", Detail: &Detail{Key: s.Key, Value: s.Previous}})
		default:
			// Someone set another value after lvsd: theirs stays.
			ops = append(ops, Op{Kind: ForgetSysctl, Reason: fmt.Sprintf("changed to %s by someone else", cur), Detail: &Detail{Key: s.Key}})
		}
	}
	return ops
}

// Holds reports whether addrs contain addr at any prefix length: a VIP on
// lo at another length than lvsd's serves as well.
func Holds(addrs []netip.Prefix, addr netip.Addr) bool {
	return slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Addr() == addr })
}

// RealServerKeys returns every sysctl key PlanRealServer needs to know:
// those of d and those in owned.
func RealServerKeys(d RealServerDesired, owned Ownership) []string {
	var keys []string
	for _, s := range d.Settings {
		keys = append(keys, s.Key)
	}
	for _, s := range owned.Sysctls {
		if !slices.Contains(keys, s.Key) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}
