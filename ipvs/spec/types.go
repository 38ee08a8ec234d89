package spec

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// Flags are IPVS service flags (IP_VS_SVC_F_*). The kernel replaces the whole
// set on every update, so a Service always carries all of them.
type Flags uint32

// Service flags. SchedFlag1/2 mean mh-fallback/mh-port for the mh scheduler.
const (
	FlagPersistent Flags = 0x0001
	// 0x0002 is IP_VS_SVC_F_HASHED, which the kernel sets on read and
	// package ipvs strips.
	FlagOnePacket  Flags = 0x0004
	FlagMHFallback Flags = 0x0008
	FlagMHPort     Flags = 0x0010
)

func (f Flags) String() string {
	var names []string
	for _, n := range []struct {
		f    Flags
		name string
	}{{FlagPersistent, "persistent"}, {FlagOnePacket, "ops"}, {FlagMHFallback, "mh-fallback"}, {FlagMHPort, "mh-port"}} {
		if f&n.f != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// Forwarding is how IPVS delivers packets to a destination: the kernel's
// method is 3 bits of a 32-bit attribute (IP_VS_CONN_F_FWD_MASK), and one
// byte keeps a Destination at 72 bytes.
type Forwarding uint8

// Forwarding methods (IP_VS_CONN_F_FWD_MASK values).
const (
	Masquerade  Forwarding = 0 // NAT
	Tunnel      Forwarding = 2
	DirectRoute Forwarding = 3
)

func (f Forwarding) String() string {
	switch f {
	case Masquerade:
		return "masq"
	case Tunnel:
		return "tunnel"
	case DirectRoute:
		return "route"
	}
	return fmt.Sprintf("fwd-%d", uint32(f))
}

// ServiceKey identifies a virtual service: either protocol+address+port or,
// for firewall-mark services, family+mark.
//
// The fields are in the order that packs them into 32 bytes, not 48: a
// key is in every op, service and map entry of 10,000 services. The
// ownership record names them, so the order is not in the file.
type ServiceKey struct {
	Addr     netip.Addr // zero for fwmark services
	FWMark   uint32
	Port     uint16
	Protocol l4.Protocol // l4.Any for fwmark services
	IPv6     bool        // address family; needed on its own for fwmark services
}

func (k ServiceKey) String() string {
	if k.FWMark != 0 {
		fam := "ipv4"
		if k.IPv6 {
			fam = "ipv6"
		}
		return fmt.Sprintf("fwmark:%d/%s", k.FWMark, fam)
	}
	return fmt.Sprintf("%s:%s", k.Protocol, netip.AddrPortFrom(k.Addr, k.Port))
}

// Compare orders keys canonically (fwmark services after address services).
func (k ServiceKey) Compare(o ServiceKey) int {
	switch {
	case k.FWMark != o.FWMark:
		return cmpInt(k.FWMark, o.FWMark)
	case k.IPv6 != o.IPv6:
		if !k.IPv6 {
			return -1
		}
		return 1
	case k.Addr != o.Addr:
		return k.Addr.Compare(o.Addr)
	case k.Port != o.Port:
		return cmpInt(k.Port, o.Port)
	}
	return cmpInt(k.Protocol, o.Protocol)
}

// Service is a virtual service's identity and options.
type Service struct {
	ServiceKey
	Scheduler string
	Flags     Flags
	Timeout   uint32 // persistence timeout, seconds (with FlagPersistent)
	Netmask   int    // persistence granularity as a prefix length; 0 means host (/32 or /128)
}

// SameOptions reports whether s and o need no update to match.
func (s Service) SameOptions(o Service) bool {
	return s.Scheduler == o.Scheduler && s.Flags == o.Flags && s.Timeout == o.Timeout &&
		s.NetmaskBits() == o.NetmaskBits()
}

// NetmaskBits is the persistence granularity as a prefix length, a zero
// Netmask read as the host (/32 or /128).
func (s Service) NetmaskBits() int {
	if s.Netmask == 0 {
		if s.IPv6 {
			return 128
		}
		return 32
	}
	return s.Netmask
}

func (s Service) String() string {
	str := fmt.Sprintf("%s %s", s.ServiceKey, s.Scheduler)
	if s.Flags != 0 {
		str += " flags=" + s.Flags.String()
	}
	if s.Flags&FlagPersistent != 0 {
		str += fmt.Sprintf(" persistent=%ds/%d", s.Timeout, s.NetmaskBits())
	}
	return str
}

// DestinationKey identifies a destination within a service.
type DestinationKey struct {
	Addr netip.Addr
	Port uint16
}

func (k DestinationKey) String() string { return netip.AddrPortFrom(k.Addr, k.Port).String() }

// Compare orders destination keys canonically.
func (k DestinationKey) Compare(o DestinationKey) int {
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	return cmpInt(k.Port, o.Port)
}

// Destination is a real server of a service. ActiveConns, InactiveConns
// and Stats are read from the kernel and ignored when writing.
//
// The fields are in the order that packs them into 72 bytes: a director of
// 10,000 services keeps 100,000 destinations desired and as many as the
// kernel has them, and plans one op with a destination for each at its
// start.
type Destination struct {
	DestinationKey
	Weight int
	// UpperThreshold and LowerThreshold are IPVS's connection limits
	// (0: none): once a new connection brings the destination's entries
	// (active + inactive, not persistence templates) to UpperThreshold it
	// is overloaded and takes no new ones until an entry that expires
	// leaves fewer than LowerThreshold (when 0: fewer than three quarters
	// of UpperThreshold). Lower above upper is refused (ERANGE).
	UpperThreshold, LowerThreshold uint32
	// The connection counters are the kernel's 32-bit ones. The kernel's
	// count of persistence templates is not kept: nothing reads it.
	ActiveConns   uint32
	InactiveConns uint32
	Forwarding    Forwarding
	// Tunnel is the encapsulation of a Tunnel destination (zero: IPIP).
	Tunnel TunnelOptions
	// Stats are the kernel's counters, nil unless read from the kernel: a
	// desired destination has none, and at 100,000 destinations 80 bytes
	// each are 8 MB of heap (Traffic reads them nil-safe).
	Stats *Stats
}

// Traffic returns d's counters, zero when it has none.
func (d Destination) Traffic() Stats {
	if d.Stats == nil {
		return Stats{}
	}
	return *d.Stats
}

// Stats are a destination's IPVS traffic counters since it was added, 64-bit
// on Linux 4.1 and later (earlier kernels send 32-bit connection and packet
// counts, which wrap: a counter reset to Prometheus). Replies of DR and
// tunnel services bypass the director, so their Out counters stay 0.
type Stats struct {
	Connections, PacketsIn, PacketsOut, BytesIn, BytesOut uint64
	// Rates are the kernel's estimates, averaged over a few seconds.
	Rates Rates
}

// Rates are IPVS's rate estimates of a destination (ipvsadm --rate).
type Rates struct {
	ConnectionsPerSecond, PacketsInPerSecond, PacketsOutPerSecond, BytesInPerSecond, BytesOutPerSecond uint64
}

// SameOptions reports whether d and o need no update to match.
func (d Destination) SameOptions(o Destination) bool {
	return d.Weight == o.Weight && d.Forwarding == o.Forwarding && d.Tunnel == o.Tunnel &&
		d.UpperThreshold == o.UpperThreshold && d.LowerThreshold == o.LowerThreshold
}

// Thresholds describes the connection limits, "upper 2 lower 1"; "" when
// none is set.
func (d Destination) Thresholds() string {
	if d.UpperThreshold == 0 && d.LowerThreshold == 0 {
		return ""
	}
	return fmt.Sprintf("upper %d lower %d", d.UpperThreshold, d.LowerThreshold)
}

// Method names how packets reach the destination: "route", "masq",
// "tunnel" (IPIP), "tunnel/gue:6080", "tunnel/gre+csum".
func (d Destination) Method() string {
	if d.Forwarding != Tunnel || d.Tunnel == (TunnelOptions{}) {
		return d.Forwarding.String()
	}
	return d.Forwarding.String() + "/" + d.Tunnel.String()
}

func cmpInt[T ~uint8 | ~uint16 | ~uint32 | ~int](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
