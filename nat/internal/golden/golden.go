// Package golden holds the rulesets that nat/rules renders into its golden
// files (nat/rules/testdata) and that nat's tests apply to a network
// namespace: the text a test compares and the ruleset the kernel lists come
// from the same Spec.
package golden

import (
	"net/netip"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
)

// Case is one golden file: testdata/Name.golden holds Render(Spec).String().
type Case struct {
	Name string
	Spec rules.Spec
}

// Get returns the case called name; it panics when there is none.
func Get(name string) rules.Spec {
	for _, c := range Cases {
		if c.Name == name {
			return c.Spec
		}
	}
	panic("no golden case " + name)
}

// Addr, Addrs, Prefixes and Port write the cases' values briefly; the
// tests of nat/rules use them too.
func Addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// Addrs parses each of ss.
func Addrs(ss ...string) []netip.Addr {
	as := make([]netip.Addr, len(ss))
	for i, s := range ss {
		as[i] = Addr(s)
	}
	return as
}

// Prefixes parses each of ss.
func Prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

// Port is the range of the one port p.
func Port(p uint16) l4.PortRange { return l4.PortRange{From: p, To: p} }

// Steering is the traffic-steering example of the design: one parent rule and two nested steering
// rules for the same VIP and port.
var Steering = []rules.MarkRule{
	{Match: rules.Match{VIP: Addr("198.51.100.1"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}}, Mark: 0x100, Comment: "parent (pool A)"},
	{Match: rules.Match{VIP: Addr("198.51.100.1"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}, Sources: Prefixes("203.0.113.0/24")}, Mark: 0x101, Comment: "steer /24 (pool B)"},
	{Match: rules.Match{VIP: Addr("198.51.100.1"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}, Sources: Prefixes("203.0.113.0/28")}, Mark: 0x102, Comment: "steer /28 (pool C)"},
}

// Cases are the golden files, one each.
var Cases = []Case{
	{"empty", rules.Spec{}},
	{"single-mark", rules.Spec{Marks: []rules.MarkRule{
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(443)}}, Mark: 1, Comment: "web"},
	}}},
	{"port-ranges", rules.Spec{Marks: []rules.MarkRule{
		// Unsorted, overlapping and adjacent ranges are merged: 80-81, 443, 8000-8099, 65000-65535.
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.UDP, Ports: []l4.PortRange{{From: 8050, To: 8099}, Port(443), {From: 8000, To: 8060}, Port(80), Port(81), {From: 65000, To: 65535}}}, Mark: 2},
		{Match: rules.Match{VIP: Addr("203.0.113.11"), Protocol: l4.SCTP, Ports: []l4.PortRange{{From: 3868, To: 3870}}}, Mark: 3, Comment: "one range"},
	}}},
	{"all-ports", rules.Spec{Marks: []rules.MarkRule{
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP}, Mark: 4, Comment: "tcp, all ports"},
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.UDP}, Mark: 5, Comment: "udp, all ports"},
	}}},
	{"protocol-any", rules.Spec{Marks: []rules.MarkRule{
		// L3_DEFAULT next to a specific rule on the same VIP: the specific one comes first.
		{Match: rules.Match{VIP: Addr("203.0.113.10")}, Mark: 6, Comment: "L3_DEFAULT"},
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(8080)}}, Mark: 7, Comment: "tcp 8080"},
		{Match: rules.Match{VIP: Addr("2001:db8::10")}, Mark: 6, Comment: "L3_DEFAULT v6"},
	}}},
	{"steering", rules.Spec{Marks: Steering}},
	{"steering-mixed-lengths", rules.Spec{Marks: []rules.MarkRule{
		// One rule with sources of two lengths is split so that rule B's /16
		// sits between its /24 and its /8: longest prefix across rules wins.
		{Match: rules.Match{VIP: Addr("198.51.100.1"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}, Sources: Prefixes("10.0.0.0/8", "192.168.1.0/24", "192.168.2.0/24")}, Mark: 0xa},
		{Match: rules.Match{VIP: Addr("198.51.100.1"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}, Sources: Prefixes("10.1.0.0/16")}, Mark: 0xb},
		// Adjacent prefixes merge; the last ends at the top of the address space.
		{Match: rules.Match{VIP: Addr("198.51.100.2"), Protocol: l4.TCP, Sources: Prefixes("10.0.1.0/24", "10.0.2.0/24", "255.255.255.0/24", "10.0.0.0/24")}, Mark: 0xc},
		{Match: rules.Match{VIP: Addr("198.51.100.2"), Protocol: l4.TCP, Sources: Prefixes("172.16.0.0/20", "172.16.1.5/32")}, Mark: 0xd, Comment: "unaligned /20 and a host"},
	}}},
	{"fullnat-v4", rules.Spec{SNAT: []rules.SNATRule{
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80), Port(443)}}, CtMark: 0x10, To: Addrs("198.51.100.2"), Comment: "web"},
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.UDP, Ports: []l4.PortRange{Port(443)}}, CtMark: 0x10, To: Addrs("198.51.100.2"), Comment: "web quic"},
	}}},
	{"conn-sync", rules.Spec{SyncPorts: []uint16{8849, 8848}, SyncGroup: netip.AddrFrom4([4]byte{224, 0, 0, 81})}},
	{"nat-v6-redirects", rules.Spec{DropRedirects6: true}},
	// Two peers, the bind's subnet and an IPv6 peer, at the default rate.
	{"cluster-port", rules.Spec{ClusterPort: &rules.ClusterPort{Port: 7946, Rate: 20000,
		Allow: Prefixes("10.0.0.0/24", "192.0.2.7/32", "10.0.1.0/25", "2001:db8::7/128")}}},
	// One subnet, IPv6 open to all, no rate limit.
	{"cluster-port-open-v6", rules.Spec{ClusterPort: &rules.ClusterPort{Port: 7000,
		Allow: Prefixes("10.0.0.0/22", "::/0")}}},
	{"fullnat-v6", rules.Spec{SNAT: []rules.SNATRule{
		{Match: rules.Match{VIP: Addr("2001:db8::10"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}}, CtMark: 0x11, To: Addrs("2001:db8:1::3", "2001:db8:1::2", "2001:db8:1::4"), Comment: "web6"},
	}}},
	// FULLNAT services of every shape: ports listed beside all ports on
	// one VIP (the listed ones win), source steering before the services
	// for every client, protocol any after the named protocols, shared
	// SNAT ranges, both families.
	{"fullnat-maps", rules.Spec{SNAT: []rules.SNATRule{
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80), Port(443)}}, CtMark: 0x10, To: Addrs("192.0.2.2", "192.0.2.3"), Comment: "web"},
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{{From: 8000, To: 8099}}}, CtMark: 0x11, To: Addrs("192.0.2.2", "192.0.2.3"), Comment: "range"},
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP}, CtMark: 0x12, To: Addrs("192.0.2.4"), Comment: "rest of tcp"},
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.UDP, Ports: []l4.PortRange{Port(53)}}, CtMark: 0x13, To: Addrs("192.0.2.4"), Comment: "dns"},
		{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}, Sources: Prefixes("198.51.100.0/24")}, CtMark: 0x14, To: Addrs("192.0.2.4"), Comment: "steered web"},
		{Match: rules.Match{VIP: Addr("203.0.113.11")}, CtMark: 0x15, To: Addrs("192.0.2.4"), Comment: "any protocol"},
		{Match: rules.Match{VIP: Addr("203.0.113.12")}, CtMark: 0x16, To: Addrs("192.0.2.4"), Comment: "any protocol 2"},
		{Match: rules.Match{VIP: Addr("203.0.113.11"), Sources: Prefixes("198.51.100.0/25")}, CtMark: 0x17, To: Addrs("192.0.2.2", "192.0.2.3"), Comment: "steered any"},
		{Match: rules.Match{VIP: Addr("2001:db8::10"), Protocol: l4.SCTP, Ports: []l4.PortRange{{From: 2000, To: 2999}}}, CtMark: 0x10, To: Addrs("2001:db8:1::2"), Comment: "sctp6"},
		{Match: rules.Match{VIP: Addr("2001:db8::11")}, CtMark: 0x11, To: Addrs("2001:db8:1::2", "2001:db8:1::3"), Comment: "any6"},
	}}},
	{"mss-clamp", rules.Spec{ClampMSS: []rules.MSSClamp{
		// A tunnel real server: the IPv4 VIPs in one rule, the IPv6 one on its own.
		{VIP: Addr("203.0.113.11"), MSS: 1440}, {VIP: Addr("203.0.113.10"), MSS: 1440}, {VIP: Addr("2001:db8::10"), MSS: 1400},
	}}},
	{"combined", rules.Spec{
		Marks: append([]rules.MarkRule{
			{Match: rules.Match{VIP: Addr("203.0.113.20"), Protocol: l4.TCP, Ports: []l4.PortRange{{From: 8000, To: 8099}, Port(9000)}}, Mark: 0x20, Comment: "range"},
			{Match: rules.Match{VIP: Addr("203.0.113.21")}, Mark: 0x21, Comment: "L3_DEFAULT"},
			{Match: rules.Match{VIP: Addr("2001:db8::20"), Protocol: l4.UDP, Ports: []l4.PortRange{{From: 5000, To: 5010}}, Sources: Prefixes("2001:db8:ffff::/48")}, Mark: 0x22, Comment: "v6 steer"},
		}, Steering...),
		SNAT: []rules.SNATRule{
			{Match: rules.Match{VIP: Addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}}, CtMark: 0x10, To: Addrs("192.0.2.2", "192.0.2.3"), Comment: "fullnat web"},
			{Match: rules.Match{VIP: Addr("203.0.113.20"), Protocol: l4.TCP, Ports: []l4.PortRange{{From: 8000, To: 8099}}}, CtMark: 0x11, To: Addrs("192.0.2.4"), Comment: "fullnat range"},
			{Match: rules.Match{VIP: Addr("2001:db8::10"), Protocol: l4.TCP, Ports: []l4.PortRange{Port(80)}}, CtMark: 0x10, To: Addrs("2001:db8:1::2"), Comment: "fullnat web6"},
		},
	}},
}
