package planner

import (
	"slices"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
	arp "github.com/lvsd/lvsd/arp/spec"
	nat "github.com/lvsd/lvsd/nat/rules"
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

// WantsNAT reports whether lvsd's nftables tables are wanted.
func (d Decapsulation) WantsNAT() bool { return d.NAT.Digest() != "" }

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
func tunnelRPFilter(settings []RealServerSetting, links []TunnelLink) []RealServerSetting {
	var devs []RealServerSetting
	for _, l := range links {
		if l.Kind == arp.KindIPIP || l.Kind == arp.KindGRE {
			devs = append(devs, RealServerSetting{Key: arp.ConfKey(l.Name, "rp_filter"), Value: "0", Accept: []string{"0"},
				Why: "no reverse-path filter on the tunnel device: it has no address, so loose mode drops too"})
		}
	}
	if len(devs) == 0 {
		return settings
	}
	out := slices.Clone(settings)
	for i := range out {
		if out[i].Key == arp.ConfKey("all", "rp_filter") {
			out[i].Value, out[i].Accept = "0", []string{"0"}
			out[i].Why = "the tunnel devices need rp_filter 0 here too: the kernel takes the larger of all and the device"
		}
	}
	return append(out, devs...)
}

// createLinks makes the missing tunnel devices exist.
func createLinks(d RealServerDesired, a RealServerActual) []Op {
	var ops []Op
	for _, l := range d.Tunnel.Links {
		if _, ok := a.Links[l.Name]; !ok {
			ops = append(ops, Op{Kind: CreateLink, Reason: "decapsulation of tunnel VIPs", Detail: &Detail{Link: l}})
		}
	}
	return ops
}

// planDecapsulation opens the GUE ports, puts the MSS clamp in place and
// then brings the tunnel devices up. A device comes up only once the plan
// could read its sysctls (it existed when the actual state was read), so
// that its reverse-path filter is loosened first.
func planDecapsulation(d RealServerDesired, a RealServerActual) []Op {
	var ops []Op
	for _, p := range d.Tunnel.FouPorts {
		if !slices.Contains(a.FouPorts, p) {
			ops = append(ops, Op{Kind: AddFouPort, Reason: "GUE of tunnel VIPs", Detail: &Detail{Fou: p}})
		}
	}
	if d.Tunnel.WantsNAT() && a.NATDigest != d.Tunnel.NAT.Digest() {
		ops = append(ops, Op{Kind: ReplaceNAT, Reason: "MSS clamp of tunnel VIPs", Detail: &Detail{NAT: d.Tunnel.NAT}})
	}
	for _, l := range d.Tunnel.Links {
		cur, ok := a.Links[l.Name]
		if !ok || cur.Up || !sysctlsRead(d, a, l.Name) {
			continue
		}
		ops = append(ops, Op{Kind: SetLinkUp, Reason: "decapsulation of tunnel VIPs", Detail: &Detail{Link: l}})
	}
	return ops
}

// sysctlsRead reports whether every desired setting of dev was read.
func sysctlsRead(d RealServerDesired, a RealServerActual, dev string) bool {
	for _, s := range d.Settings {
		if arp.ConfKeyDevice(s.Key) != dev {
			continue
		}
		if _, ok := a.Sysctls[s.Key]; !ok {
			return false
		}
	}
	return true
}

// removeLinks undoes what lvsd did to tunnel devices no longer wanted: one
// it created is deleted, a fallback device it brought up goes down again.
// A device someone else took down or deleted is only forgotten.
func removeLinks(d RealServerDesired, a RealServerActual, owned Ownership) []Op {
	var ops []Op
	for _, l := range owned.Links {
		if slices.ContainsFunc(d.Tunnel.Links, func(w TunnelLink) bool { return w.Name == l.Name }) {
			continue
		}
		cur, ok := a.Links[l.Name]
		link := TunnelLink{Name: l.Name}
		switch {
		case !ok:
			ops = append(ops, Op{Kind: ForgetLink, Reason: "deleted by someone else", Detail: &Detail{Link: link}})
		case l.Created:
			ops = append(ops, Op{Kind: DeleteLink, Reason: "no longer needed", Detail: &Detail{Link: link}})
		case cur.Up:
			ops = append(ops, Op{Kind: SetLinkDown, Reason: "no longer needed", Detail: &Detail{Link: link}})
		default:
			ops = append(ops, Op{Kind: ForgetLink, Reason: "taken down by someone else", Detail: &Detail{Link: link}})
		}
	}
	return ops
}

// removeDecapsulation closes the GUE ports lvsd opened and removes its
// nftables tables when they are no longer wanted.
func removeDecapsulation(d RealServerDesired, a RealServerActual, owned Ownership) []Op {
	var ops []Op
	for _, o := range owned.FouPorts {
		p := o.FouPort()
		switch {
		case slices.Contains(d.Tunnel.FouPorts, p):
		case slices.Contains(a.FouPorts, p):
			ops = append(ops, Op{Kind: DeleteFouPort, Reason: "no longer needed", Detail: &Detail{Fou: p}})
		default:
			ops = append(ops, Op{Kind: ForgetFouPort, Reason: "closed by someone else", Detail: &Detail{Fou: p}})
		}
	}
	switch {
	case !owned.NAT || d.Tunnel.WantsNAT():
	case a.NATDigest != "":
		ops = append(ops, Op{Kind: RemoveNAT, Reason: "no MSS clamp needed"})
	default:
		ops = append(ops, Op{Kind: ForgetNAT, Reason: "removed by someone else"})
	}
	return ops
}
