package config

import (
	"fmt"
	"strings"
)

// Encap is how a tunnel service wraps the client's packet on its way to a
// real server (forwarding: tunnel).
type Encap string

// Encapsulations. The kernel's IPVS has IPIP (IPv6-in-IPv6 for IPv6
// backends) since always, GUE since Linux 5.2 and GRE since 5.3.
const (
	EncapIPIP Encap = "ipip"
	EncapGUE  Encap = "gue"
	EncapGRE  Encap = "gre"
)

// Encaps lists the encapsulations in the order errors name them.
var Encaps = []Encap{EncapIPIP, EncapGUE, EncapGRE}

// TunnelChecksum says which checksum a GUE or GRE header carries.
type TunnelChecksum string

// Tunnel checksums: none, or a checksum of the outer UDP datagram (GUE).
// The kernel also offers one in the GRE header and GUE remote checksum
// offload, which lvsd refuses: the real server drops both (see tunnel).
const (
	ChecksumNone   TunnelChecksum = "none"
	ChecksumOuter  TunnelChecksum = "checksum"
	ChecksumRemote TunnelChecksum = "remote"
)

// TunnelOptions are the encapsulation of a service with forwarding tunnel.
type TunnelOptions struct {
	Encap Encap
	// Port is the UDP destination port of GUE packets: the port of the
	// real servers' fou-gue listener. 0 for IPIP and GRE.
	Port     uint16
	Checksum TunnelChecksum
}

// Overhead is how many bytes the encapsulation adds to a packet of family
// v6 (outer IP header, plus the UDP and GUE or GRE header): what a path
// loses of its MTU.
func (t TunnelOptions) Overhead(v6 bool) int {
	n := 20
	if v6 {
		n = 40
	}
	switch t.Encap {
	case EncapGUE:
		n += 8 + 4 // UDP, GUE base header (the outer checksum lives in UDP's)
	case EncapGRE:
		n += 4 // GRE base header (no checksum: see tunnel)
	}
	return n
}

type rawTunnel struct {
	Encap    string `yaml:"encap"`
	Port     *int   `yaml:"port" range:"1-65535"`
	Checksum string `yaml:"checksum"`
}

// tunnel validates the tunnel block of a service. It belongs to forwarding
// tunnel only; without it a tunnel service uses IPIP.
func (d *doc) tunnel(s Service, raw *rawTunnel) TunnelOptions {
	if s.Forwarding != Tunnel {
		if raw != nil {
			d.Errorf("$.tunnel", "service %q: tunnel needs forwarding: tunnel", s.Name)
		}
		return TunnelOptions{}
	}
	t := TunnelOptions{Encap: EncapIPIP, Checksum: ChecksumNone}
	if raw == nil {
		return t
	}
	t.Encap = Encap(orDefault(raw.Encap, string(EncapIPIP)))
	if !oneOf(string(t.Encap), string(EncapIPIP), string(EncapGUE), string(EncapGRE)) {
		d.Errorf("$.tunnel.encap", "service %q: tunnel encap %q is not one of %s", s.Name, raw.Encap, encapNames())
		return t
	}
	if t.Encap != EncapIPIP && s.VIP.Is6() {
		// The kernel has GUE and GRE over IPv6 too, but lvsd's real-server
		// side does not set them up (and unchecked IPv6 GUE arrives with a
		// zero UDP checksum, which IPv6 drops).
		d.Errorf("$.tunnel.encap", "service %q: encap %s is for IPv4 services; an IPv6 service tunnels with ipip (IPv6-in-IPv6)", s.Name, t.Encap)
	}
	switch {
	case raw.Port == nil && t.Encap == EncapGUE:
		d.Errorf("$.tunnel", "service %q: encap gue needs tunnel.port, the UDP port the real servers decapsulate on (their realserver.tunnel.port)", s.Name)
	case raw.Port != nil && t.Encap != EncapGUE:
		d.Errorf("$.tunnel.port", "service %q: tunnel.port is for encap gue only (%s has no port)", s.Name, t.Encap)
	case raw.Port != nil:
		t.Port = uint16(*raw.Port)
	}
	t.Checksum = TunnelChecksum(orDefault(raw.Checksum, string(ChecksumNone)))
	switch {
	case !oneOf(string(t.Checksum), string(ChecksumNone), string(ChecksumOuter), string(ChecksumRemote)):
		d.Errorf("$.tunnel.checksum", "service %q: tunnel checksum %q is not one of none, checksum", s.Name, raw.Checksum)
	case t.Checksum == ChecksumNone:
	case t.Encap == EncapIPIP:
		d.Errorf("$.tunnel.checksum", "service %q: encap ipip has no checksum of its own; checksum is for gue", s.Name)
	case t.Encap == EncapGRE:
		// Measured (Linux 6.1): gre0 counts them as receive errors.
		d.Errorf("$.tunnel.checksum", "service %q: a real server's gre0 (the fallback device, no icsum) drops GRE packets with a checksum; leave checksum out", s.Name)
	case t.Checksum == ChecksumRemote:
		// Measured (Linux 6.1): every inner TCP segment failed its
		// checksum on the real server (TcpInCsumErrors).
		d.Errorf("$.tunnel.checksum", "service %q: GUE remote checksum offload is not supported: the real servers' fou dropped the inner segments as corrupt; use checksum", s.Name)
	}
	return t
}

func encapNames() string {
	names := make([]string, len(Encaps))
	for i, e := range Encaps {
		names[i] = string(e)
	}
	return strings.Join(names, ", ")
}

// String describes the encapsulation for logs and plans: "ipip",
// "gue port 6080 checksum".
func (t TunnelOptions) String() string {
	s := string(t.Encap)
	if t.Port != 0 {
		s += fmt.Sprintf(" port %d", t.Port)
	}
	if t.Checksum != ChecksumNone && t.Checksum != "" {
		s += " " + string(t.Checksum)
	}
	return s
}
