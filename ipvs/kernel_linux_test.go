package ipvs

import (
	"net/netip"
	"syscall"
	"testing"
)

// The kernel reads an IPv4 netmask as raw mask bytes and an IPv6 one as a
// prefix length; a round trip through the moby types must keep both.
func TestMobyServiceRoundTrip(t *testing.T) {
	cases := []struct {
		svc         Service
		wantNetmask uint32
		wantFamily  uint16
	}{
		{Service{ServiceKey: ServiceKey{Protocol: TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}, Scheduler: "mh", Flags: FlagMHFallback | FlagMHPort}, 0xFFFFFFFF, syscall.AF_INET},
		{Service{ServiceKey: ServiceKey{Protocol: UDP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 53}, Scheduler: "rr", Flags: FlagPersistent, Timeout: 300, Netmask: 24}, nativeUint32([]byte{255, 255, 255, 0}), syscall.AF_INET},
		{Service{ServiceKey: ServiceKey{Protocol: TCP, Addr: netip.MustParseAddr("fd00::50"), Port: 443, IPv6: true}, Scheduler: "mh"}, 128, syscall.AF_INET6},
		{Service{ServiceKey: ServiceKey{FWMark: 7, IPv6: true}, Scheduler: "mh", Flags: FlagPersistent, Timeout: 60, Netmask: 64}, 64, syscall.AF_INET6},
	}
	for _, c := range cases {
		m := toMobyService(c.svc)
		if m.Netmask != c.wantNetmask || m.AddressFamily != c.wantFamily {
			t.Errorf("%v: netmask %#x family %d, want %#x %d", c.svc, m.Netmask, m.AddressFamily, c.wantNetmask, c.wantFamily)
		}
		m.Flags |= uint32(flagHashed) // as the kernel returns it
		if got := fromMobyService(m); got != c.svc {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, c.svc)
		}
	}
}
