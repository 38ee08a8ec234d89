package rules_test

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/internal/golden"
	"github.com/lvsd/lvsd/nat/rules"
)

// agree checks FullNATEntry (the index) against the linear scan of the
// rules for every connection probes finds in rs, and returns how many
// connections it checked and how many of them got an entry.
func agree(t *testing.T, name string, rs rules.Ruleset, r *rand.Rand) (checked, entries int) {
	t.Helper()
	scan := rs.FullNATScan()
	backend := ap("10.0.2.11:8080")
	vips, ports, clients := probes(rs, r)
	protos := []l4.Protocol{l4.TCP, l4.UDP, l4.SCTP, l4.Any, 99}
	check := func(proto l4.Protocol, client netip.Addr, vip netip.AddrPort) {
		c := netip.AddrPortFrom(client, 40000)
		got, gotOK := rs.FullNATEntry(proto, c, vip, backend)
		want, wantOK := scan(proto, c, vip, backend)
		if got != want || gotOK != wantOK {
			t.Fatalf("%s: %s %s -> %s: index %+v %v, scan %+v %v\n%s", name, proto, c, vip, got, gotOK, want, wantOK, rs)
		}
		checked++
		if gotOK {
			entries++
		}
	}
	if n := len(vips) * len(ports) * len(clients) * len(protos); n > maxProbes {
		// Too many to try them all: every VIP and port with one client,
		// every client with one VIP and port, and random ones.
		for _, v := range vips {
			for _, p := range ports {
				check(protos[r.IntN(len(protos))], clients[r.IntN(len(clients))], netip.AddrPortFrom(v, p))
			}
		}
		for _, c := range clients {
			check(protos[r.IntN(len(protos))], c, netip.AddrPortFrom(vips[r.IntN(len(vips))], ports[r.IntN(len(ports))]))
		}
		for range maxProbes {
			check(protos[r.IntN(len(protos))], clients[r.IntN(len(clients))], netip.AddrPortFrom(vips[r.IntN(len(vips))], ports[r.IntN(len(ports))]))
		}
		return checked, entries
	}
	for _, v := range vips {
		for _, p := range ports {
			for _, c := range clients {
				for _, proto := range protos {
					check(proto, c, netip.AddrPortFrom(v, p))
				}
			}
		}
	}
	return checked, entries
}

// probes are the VIPs, ports and clients where rs's answer may change:
// every rule's VIP and the edges of its ports and source ranges, plus a few
// that no rule names and some random ones.
func probes(rs rules.Ruleset, r *rand.Rand) (vips []netip.Addr, ports []uint16, clients []netip.Addr) {
	vips = addrs("203.0.113.99", "2001:db8::99", "::ffff:203.0.113.10")
	vips = append(vips, netip.Addr{})
	ports = []uint16{0, 1, 80, 65534, 65535, uint16(r.IntN(65536))}
	clients = addrs("0.0.0.0", "255.255.255.255", "::", "192.0.2.200", "2001:db8:9::1", "::ffff:198.51.100.7")
	clients = append(clients, netip.AddrFrom4([4]byte{198, 51, byte(r.IntN(256)), byte(r.IntN(256))}))
	edge := func(a netip.Addr) {
		if a.IsValid() {
			clients = append(clients, a, a.Prev(), a.Next())
		}
	}
	for _, t := range rs.Tables() {
		for _, m := range append(slices.Clone(t.PortMarks), t.RangeMarks...) {
			vips = append(vips, m.VIP)
			ports = append(ports, m.Ports.From, m.Ports.From-1, m.Ports.To, m.Ports.To+1)
		}
		for _, m := range t.VIPMarks {
			vips = append(vips, m.VIP)
		}
		for _, rule := range t.FullNAT {
			vips = append(vips, rule.DAddr)
			for _, p := range rule.Ports {
				ports = append(ports, p.From, p.From-1, p.To, p.To+1)
			}
			for _, s := range rule.SAddr {
				edge(s.From)
				edge(s.To)
			}
		}
	}
	slices.SortFunc(vips, netip.Addr.Compare)
	slices.SortFunc(clients, netip.Addr.Compare)
	slices.Sort(ports)
	return slices.Compact(vips), slices.Compact(ports), slices.Compact(clients)
}

// maxProbes bounds the connections agree tries on one ruleset.
const maxProbes = 4000

// The golden rulesets and the fleets of the benchmarks get from the index
// what they get from the scan.
func TestFullNATIndexAgreesOnRenderedRulesets(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := append([]golden.Case{{Name: "fullnat", Spec: fullnatSpec}, {Name: "fleet of 2", Spec: fleetSpec(2)},
		{Name: "fleet of 300", Spec: fleetSpec(300)}}, goldenCases...)
	total := 0
	for _, c := range cases {
		rs := mustRender(t, c.Spec)
		checked, entries := agree(t, c.Name, rs, r)
		if len(c.Spec.SNAT) > 0 && entries == 0 {
			t.Errorf("%s: none of %d connections got an entry: the probes miss the FULLNAT services", c.Name, checked)
		}
		total += entries
	}
	if total == 0 {
		t.Error("no connection got an entry")
	}
}

// Random FULLNAT specs, as Render orders them: overlapping services,
// protocol any, source-range steering with nested prefixes, ct marks
// shared between services.
func TestFullNATIndexAgreesOnRandomSpecs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	vips := addrs("198.51.100.1", "198.51.100.2", "2001:db8::1")
	src4 := prefixes("10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.3.0/24", "10.1.2.128/25", "10.1.2.7/32", "192.168.0.0/16")
	src6 := prefixes("2001:db8:a::/48", "2001:db8:a:1::/64", "2001:db8:a:2::/64", "2001:db8:b::/48")
	protos := []l4.Protocol{l4.Any, l4.TCP, l4.UDP, l4.SCTP}
	rendered, entries := 0, 0
	for range 500 {
		var spec rules.Spec
		for range 1 + r.IntN(8) {
			m := rules.Match{VIP: vips[r.IntN(len(vips))], Protocol: protos[r.IntN(len(protos))]}
			if m.Protocol != l4.Any {
				for range r.IntN(4) {
					from := uint16(1 + r.IntN(200))
					m.Ports = append(m.Ports, l4.PortRange{From: from, To: from + uint16(r.IntN(3)*r.IntN(30))})
				}
			}
			pool, to := src4, addrs("192.0.2.1", "192.0.2.2")
			if m.VIP.Is6() {
				pool, to = src6, addrs("2001:db8:ffff::1")
			}
			for range r.IntN(3) {
				m.Sources = append(m.Sources, pool[r.IntN(len(pool))])
			}
			mark := uint32(1 + r.IntN(6))
			if mark > 4 {
				to = to[:1] // the same mark always takes the same range
			}
			spec.SNAT = append(spec.SNAT, rules.SNATRule{Match: m, CtMark: mark + 0x10*uint32(len(to)), To: to})
		}
		rs, err := rules.Render(spec)
		if err != nil {
			continue // an ambiguous random spec: Render's conflict check, tested elsewhere
		}
		rendered++
		_, n := agree(t, "random spec", rs, r)
		entries += n
	}
	if rendered < 200 || entries == 0 {
		t.Errorf("%d of 500 random specs rendered, %d entries: the generator misses", rendered, entries)
	}
}

// Random tables that Render never writes still get what the scan gives:
// rules in any order, unmerged, overlapping and reversed port and source
// ranges, map lookups anywhere in the chain, ct marks without a SNAT chain
// or with several, a family's table twice.
func TestFullNATIndexAgreesOnRandomTables(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	daddrs := append(addrs("198.51.100.1", "198.51.100.2", "2001:db8::1", "::ffff:198.51.100.1"), netip.Addr{})
	bases := addrs("10.1.2.0", "10.1.2.100", "10.255.255.250", "255.255.255.254", "2001:db8:a::", "::ffff:10.1.2.3")
	protos := []l4.Protocol{l4.Any, l4.TCP, l4.UDP, l4.SCTP, 99}
	randRange := func() rules.AddrRange {
		from := bases[r.IntN(len(bases))]
		for range r.IntN(4) {
			from = from.Next()
		}
		to := from
		for range r.IntN(40) - 5 { // sometimes reversed
			if n := to.Next(); n.IsValid() {
				to = n
			}
		}
		if r.IntN(10) == 0 {
			to = from.Prev()
		}
		if !to.IsValid() {
			to = from
		}
		return rules.AddrRange{From: from, To: to}
	}
	entries := 0
	for range 400 {
		var tables []rules.Table
		for range 1 + r.IntN(3) {
			tb := rules.Table{Family: rules.Family(r.IntN(2))}
			for range r.IntN(12) {
				rule := rules.Rule{DAddr: daddrs[r.IntN(len(daddrs))], Proto: protos[r.IntN(len(protos))], SetCtMark: uint32(r.IntN(5))}
				for range r.IntN(4) {
					from := uint16(r.IntN(100))
					if r.IntN(8) == 0 {
						from = uint16(65530 + r.IntN(6))
					}
					rule.Ports = append(rule.Ports, l4.PortRange{From: from, To: from + uint16(r.IntN(20)) - 2})
				}
				for range r.IntN(4) {
					rule.SAddr = append(rule.SAddr, randRange())
				}
				switch r.IntN(8) {
				case 0:
					rule = rules.Rule{SetCtMarkMap: rules.ByPort, Verdict: rules.Return}
				case 1:
					rule = rules.Rule{SetCtMarkMap: rules.ByPortRange, Verdict: rules.Return}
				case 2:
					rule = rules.Rule{SetCtMarkMap: rules.ByVIP, Verdict: rules.Return}
				}
				tb.FullNAT = append(tb.FullNAT, rule)
			}
			// Map elements as Render makes them: disjoint port ranges per
			// VIP and protocol, one mark per VIP.
			for _, v := range daddrs[:3] {
				for _, proto := range protos[1:4] {
					next := 0
					for next <= 65535 && r.IntN(4) > 0 {
						from := next + r.IntN(60)
						to := min(from+r.IntN(30), 65535)
						if from > 65535 {
							break
						}
						m := rules.PortMark{VIP: v, Proto: proto, Ports: l4.PortRange{From: uint16(from), To: uint16(to)}, Mark: uint32(r.IntN(5))}
						if from == to {
							tb.PortMarks = append(tb.PortMarks, m)
						} else {
							tb.RangeMarks = append(tb.RangeMarks, m)
						}
						next = to + 1
					}
				}
				if r.IntN(2) == 0 {
					tb.VIPMarks = append(tb.VIPMarks, rules.VIPMark{VIP: v, Mark: uint32(r.IntN(5))})
				}
			}
			for range r.IntN(3) {
				tb.SNATChains = append(tb.SNATChains, randRange())
			}
			for range r.IntN(5) {
				// Chains past the end: a mark without a SNAT range.
				tb.SNATMarks = append(tb.SNATMarks, rules.SNATMark{Mark: uint32(r.IntN(5)), Chain: r.IntN(4)})
			}
			tables = append(tables, tb)
		}
		_, n := agree(t, "random tables", rules.RulesetOf(tables), r)
		entries += n
	}
	if entries == 0 {
		t.Error("no connection got an entry: the generator misses")
	}
}

// The zero Ruleset has no FULLNAT rules.
func TestFullNATEntryZeroRuleset(t *testing.T) {
	if e, ok := (rules.Ruleset{}).FullNATEntry(l4.TCP, ap("192.0.2.1:1000"), ap("203.0.113.10:80"), ap("10.0.2.11:80")); ok {
		t.Errorf("zero Ruleset gave %+v", e)
	}
}

// Render stays pure with the index in the Ruleset: the same Spec gives
// Rulesets that reflect.DeepEqual takes as equal (the agent compares its
// desired states so), before and after lookups.
func TestFullNATIndexKeepsRenderComparable(t *testing.T) {
	for _, c := range append([]golden.Case{{Name: "fleet of 300", Spec: fleetSpec(300)}}, goldenCases...) {
		a, b := mustRender(t, c.Spec), mustRender(t, c.Spec)
		a.FullNATEntry(l4.TCP, ap("192.0.2.1:1000"), ap("10.0.0.45:10000"), ap("10.0.2.11:80"))
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two renders of the same spec differ", c.Name)
		}
	}
}
