package config

import (
	"net/netip"
)

// RealServerTunnel is the `realserver.tunnel` block: VIPs whose packets come
// encapsulated from directors with forwarding tunnel, and how to unwrap them.
// Encap applies to the IPv4 VIPs; IPv6 VIPs always arrive as IPv6-in-IPv6.
type RealServerTunnel struct {
	// VIPs go on lo like realserver.vips; their packets arrive through the
	// decapsulation device of their family.
	VIPs  []netip.Addr
	Encap Encap
	// Port is the UDP port GUE arrives on (encap gue only).
	Port uint16
	// MTU is the MTU of the path from the directors to this server, which
	// the encapsulation shrinks for the packets inside.
	MTU int
	// ClampMSS lowers the MSS that TCP connections to the tunnel VIPs
	// announce to their clients, so that no client segment is too big for
	// the tunnel (docs/realserver.md, "MTU").
	ClampMSS bool
}

// Defaults and bounds of realserver.tunnel.
const (
	DefaultTunnelMTU = 1500
	minTunnelMTU     = 1280 // IPv6's minimum; an IPv4 path this small is no tunnel path
	maxTunnelMTU     = 65535
)

// Overhead is what the directors' encapsulation adds to a packet of
// family v6 (lvsd check refuses the checksum options that would add more
// than GUE's outer checksum, which costs no bytes). IPv6 VIPs always
// arrive as IPv6-in-IPv6 (an IPv6 service tunnels with ipip).
func (t RealServerTunnel) Overhead(v6 bool) int {
	if v6 {
		return TunnelOptions{Encap: EncapIPIP}.Overhead(true)
	}
	return TunnelOptions{Encap: t.Encap}.Overhead(false)
}

// MSS is the largest TCP segment a client may send to a tunnel VIP of
// family v6: the path MTU less the encapsulation and the inner IP and TCP
// headers (without options, as the kernel's own MSS).
func (t RealServerTunnel) MSS(v6 bool) int {
	inner := 20 + 20
	if v6 {
		inner = 40 + 20
	}
	return t.MTU - t.Overhead(v6) - inner
}

type rawRealServerTunnel struct {
	VIPs     []string `yaml:"vips"`
	Encap    string   `yaml:"encap"`
	Port     *int     `yaml:"port" range:"1-65535"`
	MTU      *int     `yaml:"mtu" range:"1280-65535"` // minTunnelMTU-maxTunnelMTU
	ClampMSS *bool    `yaml:"clamp_mss"`
}

// realServerTunnel validates realserver.tunnel; dr are realserver.vips.
func (d *doc) realServerTunnel(raw *rawRealServerTunnel, dr []netip.Addr) RealServerTunnel {
	if raw == nil {
		return RealServerTunnel{}
	}
	t := RealServerTunnel{Encap: Encap(orDefault(raw.Encap, string(EncapIPIP))), MTU: DefaultTunnelMTU, ClampMSS: true}
	t.VIPs = d.realServerVIPs("$.realserver.tunnel.vips", raw.VIPs, dr)
	if len(raw.VIPs) == 0 {
		d.Errorf("$.realserver.tunnel", "realserver.tunnel needs vips: the VIPs whose packets arrive encapsulated")
	}
	if !oneOf(string(t.Encap), string(EncapIPIP), string(EncapGUE), string(EncapGRE)) {
		d.Errorf("$.realserver.tunnel.encap", "tunnel encap %q is not one of %s", raw.Encap, encapNames())
	}
	switch {
	case raw.Port == nil && t.Encap == EncapGUE:
		d.Errorf("$.realserver.tunnel", "encap gue needs port: the UDP port the directors send GUE to (their services' tunnel.port)")
	case raw.Port != nil && t.Encap != EncapGUE:
		d.Errorf("$.realserver.tunnel.port", "port is for encap gue only (%s has no port)", t.Encap)
	case raw.Port != nil:
		t.Port = uint16(*raw.Port)
	}
	if raw.MTU != nil {
		t.MTU = *raw.MTU
	}
	if raw.ClampMSS != nil {
		t.ClampMSS = *raw.ClampMSS
	}
	return t
}
