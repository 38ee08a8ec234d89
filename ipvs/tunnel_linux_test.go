package ipvs

import (
	"bytes"
	"encoding/binary"
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
		want map[DestinationKey]TunnelOptions
	}{
		{"gue v4", [][]byte{kernelDestNest(gue, syscall.AF_INET, true)}, syscall.AF_INET, map[DestinationKey]TunnelOptions{gue.DestinationKey: gue.Tunnel}},
		{"gre v6", [][]byte{kernelDestNest(gre, syscall.AF_INET6, true)}, syscall.AF_INET6, map[DestinationKey]TunnelOptions{gre.DestinationKey: gre.Tunnel}},
		{"no tunnel attributes, no family", [][]byte{kernelDestNest(old, 0, false)}, syscall.AF_INET6, map[DestinationKey]TunnelOptions{old.DestinationKey: {}}},
	}
	for _, c := range cases {
		got, err := parseTunnels(c.msgs, c.fam)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
		for k, w := range c.want {
			if g, ok := got[k]; !ok || g != w {
				t.Errorf("%s: %s: got %v (present %v), want %v", c.name, k, g, ok, w)
			}
		}
	}
}

// A NEW_DEST/SET_DEST nest carries the full entry the kernel demands
// (forwarding, weight, both thresholds) and the tunnel attributes in the
// kernel's byte orders: the ports big-endian, the flags native.
func TestEncodeTunnelDestination(t *testing.T) {
	d := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.1.11"), Port: 80}, Weight: 7,
		Forwarding: Tunnel, Tunnel: TunnelOptions{Type: TunnelGUE, Port: 6080, Flags: TunnelChecksum}}
	attrs, err := nl.ParseRouteAttrAsMap(encodeDestination(d).Serialize()[4:])
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[uint16][]byte{
		destAttrAddr:       {10, 0, 1, 11},
		destAttrPort:       {0, 80},
		destAttrFwdMethod:  binary.NativeEndian.AppendUint32(nil, 2),
		destAttrWeight:     binary.NativeEndian.AppendUint32(nil, 7),
		destAttrUThresh:    binary.NativeEndian.AppendUint32(nil, 0),
		destAttrLThresh:    binary.NativeEndian.AppendUint32(nil, 0),
		destAttrAddrFamily: binary.NativeEndian.AppendUint16(nil, syscall.AF_INET),
		destAttrTunType:    {1},
		destAttrTunPort:    {0x17, 0xc0},
		destAttrTunFlags:   binary.NativeEndian.AppendUint16(nil, 1),
	} {
		if got := attrs[typ].Value; !bytes.Equal(got, want) {
			t.Errorf("attribute %d = %x, want %x", typ, got, want)
		}
	}
	svc, err := nl.ParseRouteAttrAsMap(encodeServiceKey(ServiceKey{FWMark: 9, IPv6: true}).Serialize()[4:])
	if err != nil {
		t.Fatal(err)
	}
	if len(svc) != 2 || !bytes.Equal(svc[svcAttrAF].Value, binary.NativeEndian.AppendUint16(nil, syscall.AF_INET6)) ||
		!bytes.Equal(svc[svcAttrFWMark].Value, binary.NativeEndian.AppendUint32(nil, 9)) {
		t.Errorf("fwmark service nest %v: want family and mark only", svc)
	}
	svc, err = nl.ParseRouteAttrAsMap(encodeServiceKey(ServiceKey{Protocol: TCP, Addr: netip.MustParseAddr("fd00::50"), Port: 443}).Serialize()[4:])
	if err != nil {
		t.Fatal(err)
	}
	if len(svc) != 4 || !bytes.Equal(svc[svcAttrPort].Value, []byte{1, 187}) || len(svc[svcAttrAddr].Value) != 16 {
		t.Errorf("address service nest %v: want family, protocol, 16-byte address and port 443 big-endian", svc)
	}
}
