package realserver

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/arp/sysctl"
)

// Loopback is the interface that holds the VIPs on a real server.
const Loopback = "lo"

// Setting is one sysctl a real server needs.
type Setting struct {
	Key string // sysctl.ConfKey form: "net/ipv4/conf/all/arp_ignore"
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

// Desired is what a real server must have.
type Desired struct {
	Addresses []netip.Prefix // on lo, sorted: /32 for IPv4, /128 for IPv6
	Settings  []Setting      // "all" first, the named interfaces in order, then the tunnel devices
	Tunnel    Decapsulation  // zero without tunnel VIPs
}

// VIPSource yields the VIPs a real server must hold. Today that is the
// configuration's static list (StaticVIPs); the director cluster can supply
// them later through another source without touching Build or Plan.
type VIPSource func(*config.Agent) []netip.Addr

// StaticVIPs returns realserver.vips of the agent file.
func StaticVIPs(a *config.Agent) []netip.Addr { return a.RealServer.VIPs }

// Build returns the desired state of a real server with configuration rs
// holding vips (and the tunnel VIPs of rs). It is pure.
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
func Build(rs config.RealServer, vips []netip.Addr) (Desired, error) {
	var d Desired
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
			Setting{Key: sysctl.ConfKey(dev, "arp_ignore"), Value: "1", Accept: []string{"1", "2", "8"}, Guard: guard,
				Why: "answer ARP only for addresses of the receiving interface (never the VIPs on lo)"},
			Setting{Key: sysctl.ConfKey(dev, "arp_announce"), Value: "2", Accept: []string{"2"}, Guard: guard,
				Why: "never use a VIP as the source of ARP requests"},
			Setting{Key: sysctl.ConfKey(dev, "rp_filter"), Value: "2", Accept: []string{"0", "2"},
				Why: "loose reverse-path filter: DR replies may leave through another interface"},
		)
	}
	var err error
	if d.Tunnel, err = buildDecapsulation(rs.Tunnel); err != nil {
		return Desired{}, fmt.Errorf("tunnel: %w", err)
	}
	d.Settings = tunnelRPFilter(d.Settings, d.Tunnel.Links)
	return d, nil
}
