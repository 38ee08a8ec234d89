package nat

import (
	"net/netip"
)

// Shared test fixtures: the golden tests render them, the netns tests apply
// them and compare `nft list` with the golden text.

func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func addrs(ss ...string) []netip.Addr {
	as := make([]netip.Addr, len(ss))
	for i, s := range ss {
		as[i] = addr(s)
	}
	return as
}

func prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = prefix(s)
	}
	return ps
}

func port(p uint16) PortRange { return PortRange{p, p} }

// steering is seed 001's example: one parent rule and two nested steering
// rules for the same VIP and port.
var steering = []MarkRule{
	{Match: Match{VIP: addr("198.51.100.1"), Protocol: TCP, Ports: []PortRange{port(80)}}, Mark: 0x100, Comment: "parent (pool A)"},
	{Match: Match{VIP: addr("198.51.100.1"), Protocol: TCP, Ports: []PortRange{port(80)}, Sources: prefixes("203.0.113.0/24")}, Mark: 0x101, Comment: "steer /24 (pool B)"},
	{Match: Match{VIP: addr("198.51.100.1"), Protocol: TCP, Ports: []PortRange{port(80)}, Sources: prefixes("203.0.113.0/28")}, Mark: 0x102, Comment: "steer /28 (pool C)"},
}

var goldenCases = []struct {
	name string
	spec Spec
}{
	{"empty", Spec{}},
	{"single-mark", Spec{Marks: []MarkRule{
		{Match: Match{VIP: addr("203.0.113.10"), Protocol: TCP, Ports: []PortRange{port(443)}}, Mark: 1, Comment: "web"},
	}}},
	{"port-ranges", Spec{Marks: []MarkRule{
		// Unsorted, overlapping and adjacent ranges are merged: 80-81, 443, 8000-8099, 65000-65535.
		{Match: Match{VIP: addr("203.0.113.10"), Protocol: UDP, Ports: []PortRange{{8050, 8099}, port(443), {8000, 8060}, port(80), port(81), {65000, 65535}}}, Mark: 2},
		{Match: Match{VIP: addr("203.0.113.11"), Protocol: SCTP, Ports: []PortRange{{3868, 3870}}}, Mark: 3, Comment: "one range"},
	}}},
	{"all-ports", Spec{Marks: []MarkRule{
		{Match: Match{VIP: addr("203.0.113.10"), Protocol: TCP}, Mark: 4, Comment: "tcp, all ports"},
		{Match: Match{VIP: addr("203.0.113.10"), Protocol: UDP}, Mark: 5, Comment: "udp, all ports"},
	}}},
	{"protocol-any", Spec{Marks: []MarkRule{
		// L3_DEFAULT next to a specific rule on the same VIP: the specific one comes first.
		{Match: Match{VIP: addr("203.0.113.10")}, Mark: 6, Comment: "L3_DEFAULT"},
		{Match: Match{VIP: addr("203.0.113.10"), Protocol: TCP, Ports: []PortRange{port(8080)}}, Mark: 7, Comment: "tcp 8080"},
		{Match: Match{VIP: addr("2001:db8::10")}, Mark: 6, Comment: "L3_DEFAULT v6"},
	}}},
	{"steering", Spec{Marks: steering}},
	{"steering-mixed-lengths", Spec{Marks: []MarkRule{
		// One rule with sources of two lengths is split so that rule B's /16
		// sits between its /24 and its /8: longest prefix across rules wins.
		{Match: Match{VIP: addr("198.51.100.1"), Protocol: TCP, Ports: []PortRange{port(80)}, Sources: prefixes("10.0.0.0/8", "192.168.1.0/24", "192.168.2.0/24")}, Mark: 0xa},
		{Match: Match{VIP: addr("198.51.100.1"), Protocol: TCP, Ports: []PortRange{port(80)}, Sources: prefixes("10.1.0.0/16")}, Mark: 0xb},
		// Adjacent prefixes merge; the last ends at the top of the address space.
		{Match: Match{VIP: addr("198.51.100.2"), Protocol: TCP, Sources: prefixes("10.0.1.0/24", "10.0.2.0/24", "255.255.255.0/24", "10.0.0.0/24")}, Mark: 0xc},
		{Match: Match{VIP: addr("198.51.100.2"), Protocol: TCP, Sources: prefixes("172.16.0.0/20", "172.16.1.5/32")}, Mark: 0xd, Comment: "unaligned /20 and a host"},
	}}},
	{"fullnat-v4", Spec{SNAT: []SNATRule{
		{Match: Match{VIP: addr("203.0.113.10"), Protocol: TCP, Ports: []PortRange{port(80), port(443)}}, CtMark: 0x10, To: addrs("198.51.100.2"), Comment: "web"},
		{Match: Match{VIP: addr("203.0.113.10"), Protocol: UDP, Ports: []PortRange{port(443)}}, CtMark: 0x10, To: addrs("198.51.100.2"), Comment: "web quic"},
	}}},
	{"conn-sync", Spec{SyncPorts: []uint16{8849, 8848}, SyncGroup: netip.AddrFrom4([4]byte{224, 0, 0, 81})}},
	{"nat-v6-redirects", Spec{DropRedirects6: true}},
	{"fullnat-v6", Spec{SNAT: []SNATRule{
		{Match: Match{VIP: addr("2001:db8::10"), Protocol: TCP, Ports: []PortRange{port(80)}}, CtMark: 0x11, To: addrs("2001:db8:1::3", "2001:db8:1::2", "2001:db8:1::4"), Comment: "web6"},
	}}},
	{"mss-clamp", Spec{ClampMSS: []MSSClamp{
		// A tunnel real server: the IPv4 VIPs in one rule, the IPv6 one on its own.
		{VIP: addr("203.0.113.11"), MSS: 1440}, {VIP: addr("203.0.113.10"), MSS: 1440}, {VIP: addr("2001:db8::10"), MSS: 1400},
	}}},
	{"combined", Spec{
		Marks: append([]MarkRule{
			{Match: Match{VIP: addr("203.0.113.20"), Protocol: TCP, Ports: []PortRange{{8000, 8099}, port(9000)}}, Mark: 0x20, Comment: "range"},
			{Match: Match{VIP: addr("203.0.113.21")}, Mark: 0x21, Comment: "L3_DEFAULT"},
			{Match: Match{VIP: addr("2001:db8::20"), Protocol: UDP, Ports: []PortRange{{5000, 5010}}, Sources: prefixes("2001:db8:ffff::/48")}, Mark: 0x22, Comment: "v6 steer"},
		}, steering...),
		SNAT: []SNATRule{
			{Match: Match{VIP: addr("203.0.113.10"), Protocol: TCP, Ports: []PortRange{port(80)}}, CtMark: 0x10, To: addrs("192.0.2.2", "192.0.2.3"), Comment: "fullnat web"},
			{Match: Match{VIP: addr("203.0.113.20"), Protocol: TCP, Ports: []PortRange{{8000, 8099}}}, CtMark: 0x11, To: addrs("192.0.2.4"), Comment: "fullnat range"},
			{Match: Match{VIP: addr("2001:db8::10"), Protocol: TCP, Ports: []PortRange{port(80)}}, CtMark: 0x10, To: addrs("2001:db8:1::2"), Comment: "fullnat web6"},
		},
	}},
}
