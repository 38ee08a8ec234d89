package ipvs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// statsNest builds a counters nest as ip_vs_genl_fill_stats(64) sends it:
// 64-bit values (and the pad attribute) in STATS64, 32-bit ones but for the
// byte counts in STATS.
func statsNest(typ int, wide bool, s Stats) *nl.RtAttr {
	n := nl.NewRtAttr(typ, nil)
	put := func(attr int, v uint64) {
		if wide || attr == statsAttrInBytes || attr == statsAttrOutBytes {
			n.AddRtAttr(attr, nl.Uint64Attr(v))
			return
		}
		n.AddRtAttr(attr, nl.Uint32Attr(uint32(v)))
	}
	put(statsAttrConns, s.Connections)
	put(statsAttrInPkts, s.PacketsIn)
	put(statsAttrOutPkts, s.PacketsOut)
	put(statsAttrInBytes, s.BytesIn)
	put(statsAttrOutBytes, s.BytesOut)
	put(statsAttrCPS, s.Rates.ConnectionsPerSecond)
	put(statsAttrInPPS, s.Rates.PacketsInPerSecond)
	put(statsAttrOutPPS, s.Rates.PacketsOutPerSecond)
	put(statsAttrInBPS, s.Rates.BytesInPerSecond)
	put(statsAttrOutBPS, s.Rates.BytesOutPerSecond)
	if wide {
		n.AddRtAttr(11, nil) // IPVS_STATS_ATTR_PAD
	}
	return n
}

// kernelDest builds one GET_DEST reply the way a kernel with STATS64 (or
// without, old) sends it.
func kernelDest(d Destination, old bool) []byte {
	n := nl.NewRtAttr(genlAttrDest, nil)
	var union [16]byte
	copy(union[:], addrBytes(d.Addr))
	n.AddRtAttr(destAttrAddr, union[:])
	n.AddRtAttr(destAttrPort, networkUint16(d.Port))
	n.AddRtAttr(destAttrFwdMethod, nl.Uint32Attr(uint32(d.Forwarding)))
	n.AddRtAttr(destAttrWeight, nl.Uint32Attr(uint32(d.Weight)))
	n.AddRtAttr(destAttrUThresh, nl.Uint32Attr(d.UpperThreshold))
	n.AddRtAttr(destAttrLThresh, nl.Uint32Attr(d.LowerThreshold))
	n.AddRtAttr(destAttrActiveConns, nl.Uint32Attr(uint32(d.ActiveConns)))
	n.AddRtAttr(destAttrInactConns, nl.Uint32Attr(uint32(d.InactiveConns)))
	n.AddRtAttr(destAttrPersistConns, nl.Uint32Attr(1))
	n.AddChild(statsNest(destAttrStats, false, d.Traffic()))
	if !old {
		n.AddChild(statsNest(destAttrStats64, true, d.Traffic()))
		fam := uint16(syscall.AF_INET)
		if d.Addr.Is6() {
			fam = syscall.AF_INET6
		}
		n.AddRtAttr(destAttrAddrFamily, nl.Uint16Attr(fam))
	}
	return append([]byte{genlCmdNewDest, 1, 0, 0}, n.Serialize()...)
}

// A destination dump keeps the kernel's list order and every field; the
// counters are the 64-bit ones where the kernel sends them, the wrapping
// 32-bit ones where it does not.
func TestParseDestinations(t *testing.T) {
	big := Stats{Connections: 5 << 32, PacketsIn: 7<<32 + 1, PacketsOut: 3, BytesIn: 9 << 40, BytesOut: 11,
		Rates: Rates{ConnectionsPerSecond: 12, PacketsInPerSecond: 13, PacketsOutPerSecond: 14, BytesInPerSecond: 15 << 33,
			BytesOutPerSecond: 16}}
	a := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 80}, Weight: 100,
		Forwarding: DirectRoute, UpperThreshold: 50, LowerThreshold: 10, ActiveConns: 4, InactiveConns: 2,
		Stats: &big}
	b := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("fd00::11"), Port: 443}, Weight: 1,
		Forwarding: Masquerade, Stats: &Stats{}} // the kernel always sends counters
	got, err := parseDestinations([][]byte{kernelDest(a, false), kernelDest(b, false)}, syscall.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	same := func(x, y Destination) bool {
		return x.Traffic() == y.Traffic() && x.Stats != nil && y.Stats != nil && ignoreStats(x) == ignoreStats(y)
	}
	if len(got) != 2 || !same(got[0], a) || !same(got[1], b) {
		t.Fatalf("got %+v\nwant %+v, %+v", got, a, b)
	}

	old, err := parseDestinations([][]byte{kernelDest(a, true)}, syscall.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := Stats{Connections: 0, PacketsIn: 1, PacketsOut: 3, BytesIn: 9 << 40, BytesOut: 11,
		Rates: Rates{ConnectionsPerSecond: 12, PacketsInPerSecond: 13, PacketsOutPerSecond: 14, BytesInPerSecond: 0,
			BytesOutPerSecond: 16}}
	if len(old) != 1 || old[0].Traffic() != wrapped || old[0].DestinationKey != a.DestinationKey {
		t.Errorf("without STATS64: got %+v, want counters %+v", old, wrapped)
	}
}

// A reply that is cut short is an error, never a zero value.
func TestParseDestinationsShort(t *testing.T) {
	n := nl.NewRtAttr(genlAttrDest, nil)
	n.AddRtAttr(destAttrAddr, []byte{10, 0})
	msg := append([]byte{genlCmdNewDest, 1, 0, 0}, n.Serialize()...)
	if _, err := parseDestinations([][]byte{msg}, syscall.AF_INET); err == nil {
		t.Error("a 2-byte address parsed")
	}
	n = nl.NewRtAttr(genlAttrDest, nil)
	n.AddRtAttr(destAttrPort, networkUint16(80))
	msg = append([]byte{genlCmdNewDest, 1, 0, 0}, n.Serialize()...)
	if _, err := parseDestinations([][]byte{msg}, syscall.AF_INET); err == nil {
		t.Error("a destination without an address parsed")
	}
}

// ignoreStats is d without its counters, to compare the rest with ==.
func ignoreStats(d Destination) Destination {
	d.Stats = nil
	return d
}

// sentDest decodes a destination write as the kernel does: the command,
// the service's nest, and the destination's attributes by type.
func sentDest(t *testing.T, cmd uint8, svc ServiceKey, dst Destination) (uint8, map[uint16][]byte, map[uint16][]byte) {
	t.Helper()
	b := newGenlRequest(0x42, cmd, 0, destWrite(svc, dst)...).Serialize()
	if len(b) < unix.NLMSG_HDRLEN+4 {
		t.Fatalf("request of %d bytes", len(b))
	}
	b = b[unix.NLMSG_HDRLEN:]
	top, err := nl.ParseRouteAttrAsMap(b[4:])
	if err != nil {
		t.Fatal(err)
	}
	nest := func(typ uint16) map[uint16][]byte {
		attrs, err := nl.ParseRouteAttrAsMap(top[typ].Value)
		if err != nil {
			t.Fatalf("nest %d: %v", typ, err)
		}
		out := map[uint16][]byte{}
		for k, a := range attrs {
			out[k] = a.Value
		}
		return out
	}
	return b[0], nest(genlAttrService), nest(genlAttrDest)
}

// Every destination write, of every command and forwarding method, sends
// the full entry with its family and all three tunnel attributes, in the
// kernel's byte orders: the ports big-endian, the rest native. The tunnel
// attributes are zero but for a tunnel destination.
func TestDestWriteCarriesEveryAttribute(t *testing.T) {
	v4 := ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	v6 := ServiceKey{FWMark: 9, IPv6: true}
	key := DestinationKey{Addr: netip.MustParseAddr("10.0.1.11"), Port: 8080}
	key6 := DestinationKey{Addr: netip.MustParseAddr("fd01::11"), Port: 443}
	gue := TunnelOptions{Type: TunnelGUE, Port: 6080, Flags: TunnelChecksum}
	cases := []struct {
		svc     ServiceKey
		dst     Destination
		fam     uint16
		addr    []byte
		wantTun TunnelOptions
	}{
		{v4, Destination{DestinationKey: key, Weight: 7, Forwarding: DirectRoute, UpperThreshold: 20, LowerThreshold: 5}, syscall.AF_INET, []byte{10, 0, 1, 11}, TunnelOptions{}},
		{v4, Destination{DestinationKey: key, Weight: 1, Forwarding: Masquerade}, syscall.AF_INET, []byte{10, 0, 1, 11}, TunnelOptions{}},
		{v4, Destination{DestinationKey: key, Weight: 1, Forwarding: Tunnel}, syscall.AF_INET, []byte{10, 0, 1, 11}, TunnelOptions{}},
		{v4, Destination{DestinationKey: key, Weight: 7, Forwarding: Tunnel, Tunnel: gue}, syscall.AF_INET, []byte{10, 0, 1, 11}, gue},
		{v6, Destination{DestinationKey: key6, Weight: 2, Forwarding: Tunnel, Tunnel: TunnelOptions{Type: TunnelGRE, Flags: TunnelChecksum}},
			syscall.AF_INET6, netip.MustParseAddr("fd01::11").AsSlice(), TunnelOptions{Type: TunnelGRE, Flags: TunnelChecksum}},
		{v4, Destination{DestinationKey: key6, Weight: 3, Forwarding: Tunnel, Tunnel: gue}, syscall.AF_INET6, netip.MustParseAddr("fd01::11").AsSlice(), gue}, // IPv4 VIP, IPv6 real server
		// A tunnel encapsulation with another forwarding method is not sent:
		// the read side drops it too.
		{v4, Destination{DestinationKey: key, Weight: 1, Forwarding: DirectRoute, Tunnel: gue}, syscall.AF_INET, []byte{10, 0, 1, 11}, TunnelOptions{}},
	}
	ne := binary.NativeEndian
	for _, c := range cases {
		for _, cmd := range []uint8{genlCmdNewDest, genlCmdSetDest, genlCmdDelDest} {
			dst := c.dst
			if cmd == genlCmdDelDest { // as DeleteDestination sends it
				dst = Destination{DestinationKey: c.dst.DestinationKey}
			}
			gotCmd, svc, got := sentDest(t, cmd, c.svc, dst)
			if gotCmd != cmd {
				t.Errorf("command %d sent as %d", cmd, gotCmd)
			}
			if len(svc) == 0 || !bytes.Equal(svc[svcAttrAF], ne.AppendUint16(nil, serviceFamily(c.svc))) {
				t.Errorf("cmd %d %s: service nest %v", cmd, c.svc, svc)
			}
			tun := c.wantTun
			if cmd == genlCmdDelDest {
				tun = TunnelOptions{}
			}
			want := map[uint16][]byte{
				destAttrAddr:       c.addr,
				destAttrPort:       binary.BigEndian.AppendUint16(nil, dst.Port),
				destAttrFwdMethod:  ne.AppendUint32(nil, uint32(dst.Forwarding)),
				destAttrWeight:     ne.AppendUint32(nil, uint32(dst.Weight)),
				destAttrUThresh:    ne.AppendUint32(nil, dst.UpperThreshold),
				destAttrLThresh:    ne.AppendUint32(nil, dst.LowerThreshold),
				destAttrAddrFamily: ne.AppendUint16(nil, c.fam),
				destAttrTunType:    {uint8(tun.Type)},
				destAttrTunPort:    binary.BigEndian.AppendUint16(nil, tun.Port),
				destAttrTunFlags:   ne.AppendUint16(nil, uint16(tun.Flags)),
			}
			if len(got) != len(want) {
				t.Errorf("cmd %d %s: %d attributes, want %d: %v", cmd, dst.Method(), len(got), len(want), got)
			}
			for typ, w := range want {
				if g, ok := got[typ]; !ok || !bytes.Equal(g, w) {
					t.Errorf("cmd %d %s -> %s %s: attribute %d = %x (sent %v), want %x", cmd, c.svc, dst.DestinationKey, dst.Method(), typ, g, ok, w)
				}
			}
		}
	}
}

// A run of writes leaves the kernel with the last one's encapsulation:
// IPIP, then GUE, then a weight change that keeps GUE and its port, then
// GRE and a threshold change that keeps GRE, then direct routing. The
// kernel is modelled as ip_vs_genl_parse_dest reads a write: every field
// it is not sent is zero.
func TestDestWritesKeepTunnel(t *testing.T) {
	svc := ServiceKey{Protocol: l4.UDP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 53}
	d := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.1.11"), Port: 53}, Weight: 1, Forwarding: Tunnel}
	kernel := map[DestinationKey]Destination{}
	write := func(cmd uint8, dst Destination) {
		t.Helper()
		_, _, attrs := sentDest(t, cmd, svc, dst)
		n := nl.NewRtAttr(genlAttrDest, nil)
		for typ, v := range attrs {
			n.AddRtAttr(int(typ), v)
		}
		got, err := parseDestination(n.Serialize()[4:], serviceFamily(svc))
		if err != nil {
			t.Fatal(err)
		}
		switch cmd {
		case genlCmdDelDest:
			delete(kernel, got.DestinationKey)
		default:
			kernel[got.DestinationKey] = got
		}
	}
	steps := []struct {
		what   string
		change func(*Destination)
		want   string
	}{
		{"ipip", func(*Destination) {}, "tunnel weight 1"},
		{"to gue", func(d *Destination) {
			d.Tunnel = TunnelOptions{Type: TunnelGUE, Port: 6080, Flags: TunnelRemoteChecksum}
		},
			"tunnel/gue:6080+remcsum weight 1"},
		{"gue weight", func(d *Destination) { d.Weight = 0 }, "tunnel/gue:6080+remcsum weight 0"},
		{"gue weight again", func(d *Destination) { d.Weight = 5 }, "tunnel/gue:6080+remcsum weight 5"},
		{"to gre", func(d *Destination) { d.Tunnel = TunnelOptions{Type: TunnelGRE} }, "tunnel/gre weight 5"},
		{"gre thresholds", func(d *Destination) { d.UpperThreshold, d.LowerThreshold = 10, 2 }, "tunnel/gre weight 5 upper 10 lower 2"},
		{"to route", func(d *Destination) { d.Forwarding, d.Tunnel = DirectRoute, TunnelOptions{} }, "route weight 5 upper 10 lower 2"},
	}
	for i, s := range steps {
		s.change(&d)
		cmd := uint8(genlCmdSetDest)
		if i == 0 {
			cmd = genlCmdNewDest
		}
		write(cmd, d)
		got := kernel[d.DestinationKey]
		desc := fmt.Sprintf("%s weight %d", got.Method(), got.Weight)
		if th := got.Thresholds(); th != "" {
			desc += " " + th
		}
		if desc != s.want || !got.SameOptions(d) {
			t.Errorf("%s: the kernel has %s (%+v), want %s", s.what, desc, got, s.want)
		}
	}
	write(genlCmdDelDest, Destination{DestinationKey: d.DestinationKey})
	if len(kernel) != 0 {
		t.Errorf("after the delete: %v", kernel)
	}
}
