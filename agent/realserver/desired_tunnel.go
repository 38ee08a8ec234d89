package realserver

import (
	"slices"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/nat"
)

// Decapsulation is what unwraps the packets of tunnel VIPs (IPVS forwarding
// tunnel): the kernel's fallback tunnel devices, which receive every packet
// of their encapsulation, held up; GUE receive ports; and the MSS clamp.
type Decapsulation struct {
	Links    []TunnelLink  // sorted by name
	FouPorts []arp.FouPort // GUE: IPv4 only
	// NAT holds the MSS clamp of lvsd's nftables tables; the zero Ruleset
	// (no digest) when no tables are wanted.
	NAT nat.Ruleset
}

// TunnelLink is a tunnel device and its kind.
type TunnelLink struct {
	Name, Kind string
}

// buildDecapsulation derives the devices from the tunnel VIPs' families and
// the encapsulation: IPv4 VIPs arrive on tunl0 (IPIP, and GUE, whose inner
// packet is IPIP's) or gre0; IPv6 VIPs always as IPv6-in-IPv6 on ip6tnl0.
func buildDecapsulation(t config.RealServerTunnel) (Decapsulation, error) {
	var d Decapsulation
	var v4, v6 bool
	var clamps []nat.MSSClamp
	for _, v := range t.VIPs {
		v = v.Unmap()
		v4, v6 = v4 || v.Is4(), v6 || v.Is6()
		if t.ClampMSS {
			clamps = append(clamps, nat.MSSClamp{VIP: v, MSS: uint16(t.MSS(v.Is6()))})
		}
	}
	if v4 {
		kind := arp.KindIPIP
		if t.Encap == config.EncapGRE {
			kind = arp.KindGRE
		}
		d.Links = append(d.Links, TunnelLink{Name: arp.FallbackDevice[kind], Kind: kind})
		if t.Encap == config.EncapGUE {
			d.FouPorts = []arp.FouPort{{Port: t.Port}}
		}
	}
	if v6 {
		d.Links = append(d.Links, TunnelLink{Name: arp.FallbackDevice[arp.KindIP6IP6], Kind: arp.KindIP6IP6})
	}
	slices.SortFunc(d.Links, func(a, b TunnelLink) int { return strings.Compare(a.Name, b.Name) })
	if len(clamps) > 0 {
		rs, err := nat.Render(nat.Spec{ClampMSS: clamps})
		if err != nil {
			return Decapsulation{}, err
		}
		d.NAT = rs
	}
	return d, nil
}

// tunnelRPFilter turns the reverse-path filter off on the IPv4 tunnel
// devices among links and on "all", in place of the loose "all" of
// settings, and returns the settings. The
// unwrapped packets come in on a device without an address from clients
// routed through another interface, and for such a device the kernel
// drops them in loose mode as in strict mode (__fib_validate_source: no
// address, last resort; measured: TcpExtIPReversePathFilter). The kernel
// uses the larger of "all" and the device's value, so both must be 0; the
// other interfaces keep their own values (a distribution sets them, as
// "default", when they appear).
func tunnelRPFilter(settings []Setting, links []TunnelLink) []Setting {
	var devs []Setting
	for _, l := range links {
		if l.Kind == arp.KindIPIP || l.Kind == arp.KindGRE {
			devs = append(devs, Setting{Key: sysctl.ConfKey(l.Name, "rp_filter"), Value: "0", Accept: []string{"0"},
				Why: "no reverse-path filter on the tunnel device: it has no address, so loose mode drops too"})
		}
	}
	if len(devs) == 0 {
		return settings
	}
	out := slices.Clone(settings)
	for i := range out {
		if out[i].Key == sysctl.ConfKey("all", "rp_filter") {
			out[i].Value, out[i].Accept = "0", []string{"0"}
			out[i].Why = "the tunnel devices need rp_filter 0 here too: the kernel takes the larger of all and the device"
		}
	}
	return append(out, devs...)
}

// wantsNAT reports whether lvsd's nftables tables are wanted.
func (d Decapsulation) wantsNAT() bool { return d.NAT.Digest() != "" }
