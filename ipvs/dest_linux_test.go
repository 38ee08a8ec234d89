package ipvs

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
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
	n.AddRtAttr(destAttrPersistConns, nl.Uint32Attr(uint32(d.PersistentConns)))
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
		PersistentConns: 1, Stats: &big}
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
