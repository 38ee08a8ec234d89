package ipvs

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

// kernelDestNest builds a destination nest as ip_vs_genl_fill_dest sends
// it: the address in a 16-byte union, port and tunnel port in network order.
func kernelDestNest(d Destination, fam uint16, withTunnel bool) []byte {
	n := nl.NewRtAttr(genlAttrDest, nil)
	var union [16]byte
	copy(union[:], addrBytes(d.Addr))
	n.AddRtAttr(destAttrAddr, union[:])
	n.AddRtAttr(destAttrPort, networkUint16(d.Port))
	n.AddRtAttr(destAttrFwdMethod, nl.Uint32Attr(uint32(d.Forwarding)))
	n.AddRtAttr(destAttrWeight, nl.Uint32Attr(uint32(d.Weight)))
	if withTunnel {
		n.AddRtAttr(destAttrTunType, nl.Uint8Attr(uint8(d.Tunnel.Type)))
		n.AddRtAttr(destAttrTunPort, networkUint16(d.Tunnel.Port))
		n.AddRtAttr(destAttrTunFlags, nl.Uint16Attr(uint16(d.Tunnel.Flags)))
	}
	if fam != 0 {
		n.AddRtAttr(destAttrAddrFamily, nl.Uint16Attr(fam))
	}
	return append([]byte{genlCmdNewDest, 1, 0, 0}, n.Serialize()...)
}

// The tunnel attributes of a GET_DEST dump reach the destinations they
// belong to, in both families; a kernel that sends none (before 5.2) reads
// as IPIP, and one that sends no family (before 3.18) takes the service's.
func TestParseTunnels(t *testing.T) {
	gue := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.1.11"), Port: 80}, Weight: 1,
		Forwarding: Tunnel, Tunnel: TunnelOptions{Type: TunnelGUE, Port: 6080, Flags: TunnelRemoteChecksum}}
	gre := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("fd01::11"), Port: 80}, Weight: 2,
		Forwarding: Tunnel, Tunnel: TunnelOptions{Type: TunnelGRE, Flags: TunnelChecksum}}
	old := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("fd01::12"), Port: 443}, Forwarding: Tunnel}
	cases := []struct {
		name string
		msgs [][]byte
		fam  uint16
		want Destination
	}{
		{"gue v4", [][]byte{kernelDestNest(gue, syscall.AF_INET, true)}, syscall.AF_INET, gue},
		{"gre v6", [][]byte{kernelDestNest(gre, syscall.AF_INET6, true)}, syscall.AF_INET6, gre},
		{"no tunnel attributes, no family", [][]byte{kernelDestNest(old, 0, false)}, syscall.AF_INET6, old},
	}
	for _, c := range cases {
		got, err := parseDestinations(c.msgs, c.fam)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(got) != 1 || got[0].DestinationKey != c.want.DestinationKey || got[0].Tunnel != c.want.Tunnel {
			t.Errorf("%s: got %+v, want %s with %s", c.name, got, c.want.DestinationKey, c.want.Tunnel)
		}
	}
}
