package rules_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
)

// fullnatSpec has two FULLNAT services (one with source ranges) and a DR
// service on the same VIP, in both families.
var fullnatSpec = rules.Spec{
	Marks: []rules.MarkRule{{Match: rules.Match{VIP: addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{{From: 8000, To: 8099}}}, Mark: 0x30, Comment: "dr range"}},
	SNAT: []rules.SNATRule{
		{Match: rules.Match{VIP: addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{port(80), port(443)}}, CtMark: 0x10, To: addrs("192.0.2.2", "192.0.2.3"), Comment: "web"},
		{Match: rules.Match{VIP: addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}, Sources: prefixes("198.51.100.0/24")}, CtMark: 0x11, To: addrs("192.0.2.9"), Comment: "web steered"},
		{Match: rules.Match{VIP: addr("203.0.113.20"), Protocol: l4.Any}, CtMark: 0x12, To: addrs("192.0.2.3"), Comment: "l3"},
		{Match: rules.Match{VIP: addr("2001:db8::10"), Protocol: l4.UDP, Ports: []l4.PortRange{port(53)}}, CtMark: 0x10, To: addrs("2001:db8:1::2"), Comment: "dns6"},
	},
}

func TestFullNATEntry(t *testing.T) {
	rs := mustRender(t, fullnatSpec)
	rsv := ap("10.0.2.11:8080")
	for _, c := range []struct {
		proto       l4.Protocol
		client, vip string
		ok          bool
		mark        uint32
		from, to    string
	}{
		{l4.TCP, "192.0.2.200:1000", "203.0.113.10:80", true, 0x10, "192.0.2.2", "192.0.2.3"},
		{l4.TCP, "192.0.2.200:1000", "203.0.113.10:443", true, 0x10, "192.0.2.2", "192.0.2.3"},
		{l4.TCP, "198.51.100.7:1000", "203.0.113.10:80", true, 0x11, "192.0.2.9", "192.0.2.9"}, // longest source prefix first
		{l4.TCP, "198.51.100.7:1000", "203.0.113.10:443", true, 0x10, "192.0.2.2", "192.0.2.3"},
		{l4.UDP, "192.0.2.200:1000", "203.0.113.10:80", false, 0, "", ""},   // no udp rule
		{l4.TCP, "192.0.2.200:1000", "203.0.113.10:8000", false, 0, "", ""}, // the DR service
		{l4.UDP, "192.0.2.200:1000", "203.0.113.20:5000", true, 0x12, "192.0.2.3", "192.0.2.3"},
		{l4.SCTP, "192.0.2.200:1000", "203.0.113.20:5000", false, 0, "", ""}, // not restored
		{l4.UDP, "[2001:db8:9::1]:1000", "[2001:db8::10]:53", true, 0x10, "2001:db8:1::2", "2001:db8:1::2"},
		{l4.UDP, "[2001:db8:9::1]:1000", "[2001:db8::11]:53", false, 0, "", ""},
	} {
		e, ok := rs.FullNATEntry(c.proto, ap(c.client), ap(c.vip), rsv)
		if ok != c.ok {
			t.Errorf("%s %s -> %s: ok %v, want %v", c.proto, c.client, c.vip, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		want := rules.ConntrackEntry{Protocol: c.proto, Client: ap(c.client), VIP: ap(c.vip), Backend: rsv,
			SNATFrom: addr(c.from), SNATTo: addr(c.to), Mark: c.mark}
		if e != want {
			t.Errorf("%s %s -> %s:\n got %+v\nwant %+v", c.proto, c.client, c.vip, e, want)
		}
	}
}

func TestFullNATVIPs(t *testing.T) {
	rs := mustRender(t, fullnatSpec)
	for a, want := range map[string][]netip.Addr{
		"203.0.113.10":  addrs("203.0.113.10"),
		"192.0.2.3":     addrs("203.0.113.10", "203.0.113.20"), // shared SNAT address
		"192.0.2.9":     addrs("203.0.113.10"),
		"2001:db8:1::2": addrs("2001:db8::10"),
		"192.0.2.4":     nil,
		"203.0.113.30":  nil,
	} {
		if got := rs.FullNATVIPs(addr(a)); !reflect.DeepEqual(got, want) {
			t.Errorf("FullNATVIPs(%s) = %v, want %v", a, got, want)
		}
	}
}

// The VIPs come from every place a FULLNAT ct mark is given: the
// port and range maps, the map for protocol any, the source-steered rules.
func TestFullNATVIPsThroughMaps(t *testing.T) {
	var spec rules.Spec
	for _, c := range goldenCases {
		if c.Name == "fullnat-maps" {
			spec = c.Spec
		}
	}
	rs := mustRender(t, spec)
	for a, want := range map[string][]netip.Addr{
		"192.0.2.4":     addrs("203.0.113.10", "203.0.113.11", "203.0.113.12"),
		"192.0.2.2":     addrs("203.0.113.10", "203.0.113.11"), // the ports map, the steered rule for any protocol
		"203.0.113.12":  addrs("203.0.113.12"),
		"2001:db8:1::3": addrs("2001:db8::11"),
		"192.0.2.5":     nil,
	} {
		if got := rs.FullNATVIPs(addr(a)); !reflect.DeepEqual(got, want) {
			t.Errorf("FullNATVIPs(%s) = %v, want %v", a, got, want)
		}
	}
}

func TestGuardRanges(t *testing.T) {
	r := func(from, to string) rules.AddrRange { return rules.AddrRange{addr(from), addr(to)} }
	merged := rules.MergeRanges([]rules.AddrRange{r("10.0.0.5", "10.0.0.5"), r("10.0.0.1", "10.0.0.2"), r("10.0.0.3", "10.0.0.3"), r("10.0.0.2", "10.0.0.2")})
	if want := []rules.AddrRange{r("10.0.0.1", "10.0.0.3"), r("10.0.0.5", "10.0.0.5")}; !reflect.DeepEqual(merged, want) {
		t.Errorf("mergeRanges = %v, want %v", merged, want)
	}
	for _, c := range []struct {
		vips []netip.Addr
		want []rules.AddrRange
	}{
		{nil, merged},
		{addrs("10.0.0.1"), []rules.AddrRange{r("10.0.0.2", "10.0.0.3"), r("10.0.0.5", "10.0.0.5")}},
		{addrs("10.0.0.2", "10.0.0.5"), []rules.AddrRange{r("10.0.0.1", "10.0.0.1"), r("10.0.0.3", "10.0.0.3")}},
		{addrs("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"), nil},
	} {
		if got := rules.SubtractAddrs(merged, c.vips); !reflect.DeepEqual(got, c.want) {
			t.Errorf("subtractAddrs(%v) = %v, want %v", c.vips, got, c.want)
		}
	}
	// A SNAT address that is a VIP stays out of the guard.
	rs := mustRender(t, rules.Spec{SNAT: []rules.SNATRule{
		{Match: rules.Match{VIP: addr("203.0.113.10"), Protocol: l4.TCP}, CtMark: 1, To: addrs("203.0.113.10", "203.0.113.11"), Comment: "snat to the vip"},
	}})
	if !strings.Contains(rs.String(), "ip daddr 203.0.113.11 meta l4proto { tcp, udp, sctp } ct state invalid,new drop") {
		t.Errorf("guard:\n%s", rs)
	}
}
