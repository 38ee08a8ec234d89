package ecmplab

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// The lab's numbers: the router is AS 65000, the directors AS 65001 (one
// AS for all directors: equal AS paths make FRR spread over them with
// maximum-paths, no multipath-relax needed).
const (
	RouterASN   = 65000
	DirectorASN = 65001
)

// BFD profile of both sides: 100 ms × 3 (ecmp-lab.md).
const bfdProfile = ` profile fast
  receive-interval 100
  transmit-interval 100
  detect-multiplier 3
 !
`

// Neighbor is one director as the router sees it.
type Neighbor struct {
	Address  netip.Addr
	Password string // TCP-MD5; "" none
	BFD      bool
	// BFDInterval and BFDMultiplier replace the profile fast (100 ms × 3)
	// for this neighbour when set: the integration tests run many
	// processes in one emulated machine, where 300 ms of no scheduling
	// happens.
	BFDInterval   time.Duration
	BFDMultiplier int
	// HoldTime replaces the router's hold time of 3 s (keepalive a third
	// of it) for this neighbour when set.
	HoldTime time.Duration
}

// bfdProfileName is the name of n's BFD profile.
func (n Neighbor) bfdProfileName() string {
	if n.BFDInterval == 0 {
		return "fast"
	}
	return fmt.Sprintf("t%dx%d", n.BFDInterval.Milliseconds(), n.BFDMultiplier)
}

// VIPRanges are where the lab's VIPs live; the router accepts host routes
// from these ranges only.
var VIPRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/64")}

// RouterConfig is the frr.conf of the upstream router, the one docs/ecmp.md
// shows: eBGP with every director, which may announce host routes (/32,
// /128) out of VIPRanges and gets nothing back; ECMP over up to 8 paths
// per family; BFD where asked; fast timers (keepalive 1 s, hold 3 s,
// connect retry 1 s) so tests reconnect quickly; neighbour changes
// logged.
func RouterConfig(routerID netip.Addr, neighbors []Neighbor) string {
	var b strings.Builder
	b.WriteString("frr defaults traditional\n")
	seq := [2]int{} // per family
	for _, r := range VIPRanges {
		if r.Addr().Is4() {
			seq[0] += 10
			fmt.Fprintf(&b, "ip prefix-list lvsd-vips4 seq %d permit %s ge 32\n", seq[0], r)
		} else {
			seq[1] += 10
			fmt.Fprintf(&b, "ipv6 prefix-list lvsd-vips6 seq %d permit %s ge 128\n", seq[1], r)
		}
	}
	b.WriteString("route-map lvsd-in4 permit 10\n match ip address prefix-list lvsd-vips4\n!\n")
	b.WriteString("route-map lvsd-in6 permit 10\n match ipv6 address prefix-list lvsd-vips6\n!\n")
	b.WriteString("route-map lvsd-out deny 10\n!\n")
	b.WriteString("bfd\n" + bfdProfile)
	profiles := map[string]bool{}
	for _, n := range neighbors {
		if name := n.bfdProfileName(); n.BFDInterval != 0 && !profiles[name] {
			profiles[name] = true
			ms := n.BFDInterval.Milliseconds()
			fmt.Fprintf(&b, " profile %s\n  receive-interval %d\n  transmit-interval %d\n  detect-multiplier %d\n !\n", name, ms, ms, n.BFDMultiplier)
		}
	}
	b.WriteString("!\n")
	fmt.Fprintf(&b, "router bgp %d\n bgp router-id %s\n bgp log-neighbor-changes\n timers bgp 1 3\n", RouterASN, routerID)
	for _, n := range neighbors {
		fmt.Fprintf(&b, " neighbor %s remote-as %d\n neighbor %s timers connect 1\n", n.Address, DirectorASN, n.Address)
		if n.HoldTime != 0 {
			hold := int(n.HoldTime.Seconds())
			fmt.Fprintf(&b, " neighbor %s timers %d %d\n", n.Address, hold/3, hold)
		}
		if n.BFD {
			fmt.Fprintf(&b, " neighbor %s bfd profile %s\n", n.Address, n.bfdProfileName())
		}
		if n.Password != "" {
			fmt.Fprintf(&b, " neighbor %s password %s\n", n.Address, n.Password)
		}
	}
	for _, af := range []struct {
		name string
		v6   bool
	}{{"ipv4", false}, {"ipv6", true}} {
		fmt.Fprintf(&b, " address-family %s unicast\n  maximum-paths 8\n", af.name)
		for _, n := range neighbors {
			if n.Address.Is6() != af.v6 {
				fmt.Fprintf(&b, "  no neighbor %s activate\n", n.Address)
				continue
			}
			in := "lvsd-in4"
			if af.v6 {
				in = "lvsd-in6"
			}
			fmt.Fprintf(&b, "  neighbor %s activate\n  neighbor %s route-map %s in\n  neighbor %s route-map lvsd-out out\n",
				n.Address, n.Address, in, n.Address)
		}
		b.WriteString(" exit-address-family\n")
	}
	b.WriteString("!\n")
	return b.String()
}

// DirectorFRRConfig is the frr.conf of a director that announces its VIPs
// with FRR itself (the alternative to lvsd's embedded speaker, as
// MetalLB's FRR mode does): one eBGP session with BFD to the router, the
// VIPs (held on lo) as network statements.
func DirectorFRRConfig(routerID, router netip.Addr, vips ...netip.Prefix) string {
	var b strings.Builder
	b.WriteString("frr defaults traditional\nbfd\n" + bfdProfile + "!\n")
	fmt.Fprintf(&b, "router bgp %d\n bgp router-id %s\n no bgp ebgp-requires-policy\n timers bgp 1 3\n", DirectorASN, routerID)
	fmt.Fprintf(&b, " neighbor %s remote-as %d\n neighbor %s timers connect 1\n neighbor %s bfd profile fast\n",
		router, RouterASN, router, router)
	family := "ipv4"
	if router.Is6() {
		family = "ipv6"
	}
	fmt.Fprintf(&b, " address-family %s unicast\n", family)
	if router.Is6() {
		fmt.Fprintf(&b, "  neighbor %s activate\n", router)
	}
	for _, v := range vips {
		fmt.Fprintf(&b, "  network %s\n", v)
	}
	b.WriteString(" exit-address-family\n!\n")
	return b.String()
}
