package spec

import (
	"fmt"
	"strings"
)

// TunnelType is the encapsulation of a tunnel destination
// (IP_VS_CONN_F_TUNNEL_TYPE_*). IPIP means IPv6-in-IPv6 for an IPv6
// destination.
type TunnelType uint8

// Tunnel types. GUE needs Linux 5.2, GRE 5.3; older kernels know only IPIP.
const (
	TunnelIPIP TunnelType = 0
	TunnelGUE  TunnelType = 1
	TunnelGRE  TunnelType = 2
)

func (t TunnelType) String() string {
	switch t {
	case TunnelIPIP:
		return "ipip"
	case TunnelGUE:
		return "gue"
	case TunnelGRE:
		return "gre"
	}
	return fmt.Sprintf("tun-%d", uint8(t))
}

// TunnelFlags are the encapsulation's checksum options
// (IP_VS_TUNNEL_ENCAP_FLAG_*).
type TunnelFlags uint16

// Tunnel flags: a checksum in the outer UDP (GUE) or GRE header, or GUE's
// remote checksum offload. The kernel takes one of them at most.
const (
	TunnelChecksum       TunnelFlags = 1 << 0
	TunnelRemoteChecksum TunnelFlags = 1 << 1
)

// TunnelOptions are the IPVS_DEST_ATTR_TUN_* attributes of a destination.
// The zero value is plain IPIP, which is also what a kernel without these
// attributes does.
type TunnelOptions struct {
	Type  TunnelType
	Port  uint16 // GUE: the UDP destination port; 0 otherwise
	Flags TunnelFlags
}

// String reads "ipip", "gue:6080", "gue:6080+remcsum", "gre+csum".
func (t TunnelOptions) String() string {
	var b strings.Builder
	b.WriteString(t.Type.String())
	if t.Port != 0 {
		fmt.Fprintf(&b, ":%d", t.Port)
	}
	if t.Flags&TunnelChecksum != 0 {
		b.WriteString("+csum")
	}
	if t.Flags&TunnelRemoteChecksum != 0 {
		b.WriteString("+remcsum")
	}
	return b.String()
}
