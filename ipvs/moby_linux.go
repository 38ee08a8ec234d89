package ipvs

// moby/ipvs, wrapped to what it expresses fully: services and the
// namespace's timeouts. Its destinations are out of reach on purpose: its
// NEW_DEST and SET_DEST carry no IPVS_DEST_ATTR_TUN_* attributes, which the
// kernel reads as IPIP, so a write through it would turn a GUE or GRE
// destination into IPIP; and its reads have neither the tunnel attributes
// nor the 64-bit counters. Destinations go through dest_linux.go only. This
// is the only file that imports moby/ipvs (TestMobyOnlyHere).

import (
	"net"
	"net/netip"
	"syscall"

	"github.com/lvsd/lvsd/ipvs/l4"

	mobyipvs "github.com/moby/ipvs"
)

// mobyConn is one moby/ipvs socket; one request at a time.
type mobyConn struct{ h *mobyipvs.Handle }

// openMoby opens a socket in the namespace at netnsPath ("" = current).
func openMoby(netnsPath string) (mobyConn, error) {
	h, err := mobyipvs.New(netnsPath)
	return mobyConn{h}, err
}

func (c mobyConn) close() {
	if c.h != nil {
		c.h.Close()
	}
}

func (c mobyConn) services() ([]Service, error) {
	raw, err := c.h.GetServices()
	if err != nil {
		return nil, err
	}
	out := make([]Service, 0, len(raw))
	for _, s := range raw {
		out = append(out, fromMobyService(s))
	}
	return out, nil
}

func (c mobyConn) service(k ServiceKey) (Service, error) {
	raw, err := c.h.GetService(toMobyService(Service{ServiceKey: k}))
	if err != nil {
		return Service{}, err
	}
	return fromMobyService(raw), nil
}

func (c mobyConn) addService(s Service) error    { return c.h.NewService(toMobyService(s)) }
func (c mobyConn) updateService(s Service) error { return c.h.UpdateService(toMobyService(s)) }
func (c mobyConn) deleteService(k ServiceKey) error {
	return c.h.DelService(toMobyService(Service{ServiceKey: k}))
}

func (c mobyConn) timeouts() (Timeouts, error) {
	m, err := c.h.GetConfig()
	if err != nil {
		return Timeouts{}, err
	}
	return Timeouts{TCP: m.TimeoutTCP, TCPFin: m.TimeoutTCPFin, UDP: m.TimeoutUDP}, nil
}

// setTimeouts sends all three; the kernel leaves a timeout of 0 as it is.
func (c mobyConn) setTimeouts(t Timeouts) error {
	return c.h.SetConfig(&mobyipvs.Config{TimeoutTCP: t.TCP, TimeoutTCPFin: t.TCPFin, TimeoutUDP: t.UDP})
}

func toMobyService(s Service) *mobyipvs.Service {
	m := &mobyipvs.Service{
		AddressFamily: syscall.AF_INET,
		Protocol:      uint16(s.Protocol),
		Port:          s.Port,
		FWMark:        s.FWMark,
		SchedName:     s.Scheduler,
		Flags:         uint32(s.Flags &^ flagHashed),
		Timeout:       s.Timeout,
	}
	if s.IPv6 || s.Addr.Is6() && !s.Addr.Is4In6() {
		m.AddressFamily = syscall.AF_INET6
	}
	if s.Addr.IsValid() {
		m.Address = net.IP(s.Addr.AsSlice())
	} else if m.AddressFamily == syscall.AF_INET6 {
		m.Address = net.IPv6zero
	} else {
		m.Address = net.IPv4zero.To4()
	}
	// The kernel reads the IPv4 netmask as raw mask bytes but the IPv6 one as
	// a prefix length (and rejects 0 for IPv6 even without persistence).
	bits := s.NetmaskBits()
	if m.AddressFamily == syscall.AF_INET6 {
		m.Netmask = uint32(bits)
	} else {
		mask := net.CIDRMask(bits, 32)
		m.Netmask = nativeUint32(mask)
	}
	return m
}

func fromMobyService(m *mobyipvs.Service) Service {
	s := Service{
		ServiceKey: ServiceKey{
			Protocol: l4.Protocol(m.Protocol),
			Port:     m.Port,
			FWMark:   m.FWMark,
			IPv6:     m.AddressFamily == syscall.AF_INET6,
		},
		Scheduler: m.SchedName,
		Flags:     Flags(m.Flags) &^ flagHashed,
		Timeout:   m.Timeout,
	}
	if m.FWMark == 0 {
		if a, ok := netip.AddrFromSlice(m.Address); ok {
			s.Addr = a.Unmap()
		}
		s.Protocol = l4.Protocol(m.Protocol)
	} else {
		s.Protocol = 0
	}
	if s.IPv6 {
		s.Netmask = int(m.Netmask)
	} else {
		ones, _ := net.IPMask(nativeBytes(m.Netmask)).Size()
		s.Netmask = ones
	}
	if s.Netmask == netmaskBitsHost(s) {
		s.Netmask = 0
	}
	return s
}

func netmaskBitsHost(s Service) int {
	if s.IPv6 {
		return 128
	}
	return 32
}
