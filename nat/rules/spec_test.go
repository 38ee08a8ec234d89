package rules_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
)

func TestRenderRejects(t *testing.T) {
	vip := addr("203.0.113.10")
	tcp80 := rules.Match{VIP: vip, Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}}
	for _, tc := range []struct {
		name string
		spec rules.Spec
		want string
	}{
		{"no VIP", rules.Spec{Marks: []rules.MarkRule{{Mark: 1}}}, "no VIP"},
		{"mark 0", rules.Spec{Marks: []rules.MarkRule{{Match: tcp80}}}, "mark 0"},
		{"ct mark 0", rules.Spec{SNAT: []rules.SNATRule{{Match: tcp80, To: addrs("192.0.2.1")}}}, "ct mark 0"},
		{"multicast VIP", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: addr("224.0.0.1")}, Mark: 1}}}, "not a unicast"},
		{"mapped VIP", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: addr("::ffff:203.0.113.10")}, Mark: 1}}}, "write 203.0.113.10"},
		{"zoned VIP", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: addr("fe80::1%eth0")}, Mark: 1}}}, "zoned"},
		{"unknown protocol", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: vip, Protocol: 47}, Mark: 1}}}, "protocol 47"},
		{"ports without protocol", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: vip, Ports: []l4.PortRange{port(53)}}, Mark: 1}}}, "ports need protocol"},
		{"port 0", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: vip, Protocol: l4.UDP, Ports: []l4.PortRange{port(0)}}, Mark: 1}}}, "port range 0-0"},
		{"reversed range", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: vip, Protocol: l4.UDP, Ports: []l4.PortRange{{From: 90, To: 80}}}, Mark: 1}}}, "port range 90-80"},
		{"mixed family source", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: vip, Sources: prefixes("2001:db8::/32")}, Mark: 1}}}, "not the VIP's address family"},
		{"host bits", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: vip, Sources: prefixes("10.1.2.3/24")}, Mark: 1}}}, "did you mean 10.1.2.0/24"},
		{"zero prefix", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: vip, Sources: prefixes("0.0.0.0/0")}, Mark: 1}}}, "leave sources empty"},
		{"invalid prefix", rules.Spec{Marks: []rules.MarkRule{{Match: rules.Match{VIP: vip, Sources: []netip.Prefix{{}}}, Mark: 1}}}, "invalid source prefix"},
		{"quote in comment", rules.Spec{Marks: []rules.MarkRule{{Match: tcp80, Mark: 1, Comment: `a "b"`}}}, "no quotes"},
		{"long comment", rules.Spec{Marks: []rules.MarkRule{{Match: tcp80, Mark: 1, Comment: strings.Repeat("x", 129)}}}, "longer than 128"},
		{"no SNAT addresses", rules.Spec{SNAT: []rules.SNATRule{{Match: tcp80, CtMark: 1}}}, "no SNAT source addresses"},
		{"mixed family SNAT", rules.Spec{SNAT: []rules.SNATRule{{Match: tcp80, CtMark: 1, To: addrs("2001:db8::1")}}}, "not the VIP's address family"},
		{"SNAT gap", rules.Spec{SNAT: []rules.SNATRule{{Match: tcp80, CtMark: 1, To: addrs("192.0.2.1", "192.0.2.3")}}}, "not consecutive"},
		{"ct mark with two targets", rules.Spec{SNAT: []rules.SNATRule{
			{Match: tcp80, CtMark: 1, To: addrs("192.0.2.1"), Comment: "a"},
			{Match: rules.Match{VIP: addr("203.0.113.11"), Protocol: l4.TCP}, CtMark: 1, To: addrs("192.0.2.2"), Comment: "b"},
		}}, "ct mark 0x1 already SNATs to 192.0.2.1"},
		{"same match, two marks", rules.Spec{Marks: []rules.MarkRule{
			{Match: tcp80, Mark: 1, Comment: "a"},
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP, Ports: []l4.PortRange{{From: 70, To: 90}}}, Mark: 2, Comment: "b"},
		}}, "mark rule 0 (a) and mark rule 1 (b) both match tcp 203.0.113.10 from every client with different packet marks"},
		{"same steering prefix, two marks", rules.Spec{Marks: []rules.MarkRule{
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP, Sources: prefixes("10.0.0.0/8", "10.1.0.0/16")}, Mark: 1},
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP, Sources: prefixes("10.1.0.0/16")}, Mark: 2},
		}}, "from clients in 10.1.0.0/16"},
		{"same match, two ct marks", rules.Spec{SNAT: []rules.SNATRule{
			{Match: tcp80, CtMark: 1, To: addrs("192.0.2.1")},
			{Match: tcp80, CtMark: 2, To: addrs("192.0.2.2")},
		}}, "different ct marks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rules.Render(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Render: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRenderReportsEveryError(t *testing.T) {
	_, err := rules.Render(rules.Spec{Marks: []rules.MarkRule{{Comment: "first"}, {Match: rules.Match{VIP: addr("192.0.2.1")}, Comment: "second"}}})
	if err == nil || !strings.Contains(err.Error(), "first") || !strings.Contains(err.Error(), "second") {
		t.Errorf("Render: %v; want both rules named", err)
	}
}

func TestRenderAccepts(t *testing.T) {
	vip := addr("203.0.113.10")
	for _, tc := range []struct {
		name string
		spec rules.Spec
	}{
		// Different steering prefixes and all-ports next to listed ports are
		// settled by rule order, not conflicts.
		{"parent and steering", rules.Spec{Marks: steering}},
		{"all ports and listed ports", rules.Spec{Marks: []rules.MarkRule{
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP}, Mark: 1},
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}}, Mark: 2},
		}}},
		{"duplicate rules", rules.Spec{Marks: []rules.MarkRule{
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP}, Mark: 1},
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP}, Mark: 1},
		}}},
		{"same ct mark for tcp and udp", rules.Spec{SNAT: []rules.SNATRule{
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP}, CtMark: 1, To: addrs("192.0.2.1")},
			{Match: rules.Match{VIP: vip, Protocol: l4.UDP}, CtMark: 1, To: addrs("192.0.2.1")},
		}}},
		{"same mark in both families", rules.Spec{SNAT: []rules.SNATRule{
			{Match: rules.Match{VIP: vip, Protocol: l4.TCP}, CtMark: 1, To: addrs("192.0.2.1")},
			{Match: rules.Match{VIP: addr("2001:db8::1"), Protocol: l4.TCP}, CtMark: 1, To: addrs("2001:db8::2")},
		}}},
	} {
		if _, err := rules.Render(tc.spec); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestDuplicateRulesRenderOnce(t *testing.T) {
	r := rules.MarkRule{Match: rules.Match{VIP: addr("203.0.113.10"), Protocol: l4.TCP}, Mark: 1}
	one, two := mustRender(t, rules.Spec{Marks: []rules.MarkRule{r}}), mustRender(t, rules.Spec{Marks: []rules.MarkRule{r, r}})
	if one.String() != two.String() {
		t.Errorf("a duplicated rule renders twice:\n%s", two)
	}
}

func TestAddrRangeString(t *testing.T) {
	for _, tc := range []struct{ from, to, want string }{
		{"10.0.0.1", "10.0.0.1", "10.0.0.1"},
		{"10.0.0.0", "10.0.1.255", "10.0.0.0/23"},
		{"10.0.1.0", "10.0.2.255", "10.0.1.0-10.0.2.255"},
		{"192.0.2.2", "192.0.2.3", "192.0.2.2/31"},
		{"192.0.2.3", "192.0.2.4", "192.0.2.3-192.0.2.4"},
		{"0.0.0.0", "255.255.255.255", "0.0.0.0/0"},
		{"2001:db8::", "2001:db8::ffff", "2001:db8::/112"},
		{"2001:db8::2", "2001:db8::5", "2001:db8::2-2001:db8::5"},
	} {
		if got := (rules.AddrRange{addr(tc.from), addr(tc.to)}).String(); got != tc.want {
			t.Errorf("%s-%s: %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestMergePorts(t *testing.T) {
	got := rules.MergePorts([]l4.PortRange{{From: 8050, To: 8099}, port(443), {From: 8000, To: 8060}, port(80), port(81), {From: 65000, To: 65535}, port(65535)})
	want := []l4.PortRange{{From: 80, To: 81}, port(443), {From: 8000, To: 8099}, {From: 65000, To: 65535}}
	if rules.ComparePorts(got, want) != 0 {
		t.Errorf("mergePorts = %v, want %v", got, want)
	}
}

func TestMergePrefixesAtTheTop(t *testing.T) {
	got := rules.MergePrefixes(prefixes("255.255.255.0/24", "255.255.254.0/24", "10.0.0.0/8"))
	if len(got) != 2 || got[1].String() != "255.255.254.0/23" {
		t.Errorf("mergePrefixes = %v", got)
	}
}
