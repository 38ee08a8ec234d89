package rules_test

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
)

// packet is what the prerouting rules look at.
type packet struct {
	src, dst netip.Addr
	proto    l4.Protocol
	port     uint16
}

// eval runs the rendered prerouting chain (and the fullnat chain it jumps
// to) over p the way nf_tables does: first matching rule with a verdict
// ends the chain. It returns the packet mark and the ct mark set.
func eval(rs rules.Ruleset, p packet) (mark, ctMark uint32) {
	t := rs.Tables()[rules.FamilyOf(p.dst)]
	for _, r := range t.Pre {
		switch {
		case r.NotVIP:
			if !slices.Contains(t.VIPs, p.dst) {
				return mark, ctMark // accept: not for a VIP
			}
		case r.Verdict == rules.JumpFullNAT:
			for _, f := range t.FullNAT {
				if m, ok := lookupCtMark(t, f, p); ok {
					ctMark = m
					break // return
				}
			}
		case matches(r, p):
			return r.SetMark, ctMark // accept
		}
	}
	return mark, ctMark
}

// lookupCtMark evaluates rule f of the fullnat chain: a map lookup finds
// the element whose key holds the packet's (the kernel's maps never hold
// overlapping elements), a plain rule matches.
func lookupCtMark(t rules.Table, f rules.Rule, p packet) (uint32, bool) {
	switch f.SetCtMarkMap {
	case rules.ByPort, rules.ByPortRange:
		marks := t.PortMarks
		if f.SetCtMarkMap == rules.ByPortRange {
			marks = t.RangeMarks
		}
		for _, m := range marks {
			if m.VIP == p.dst && m.Proto == p.proto && m.Ports.From <= p.port && p.port <= m.Ports.To {
				return m.Mark, true
			}
		}
		return 0, false
	case rules.ByVIP:
		for _, m := range t.VIPMarks {
			if m.VIP == p.dst {
				return m.Mark, true
			}
		}
		return 0, false
	}
	return f.SetCtMark, matches(f, p)
}

func matches(r rules.Rule, p packet) bool {
	if r.DAddr.IsValid() && r.DAddr != p.dst {
		return false
	}
	if len(r.SAddr) > 0 && !slices.ContainsFunc(r.SAddr, func(a rules.AddrRange) bool {
		return a.From.Compare(p.src) <= 0 && p.src.Compare(a.To) <= 0
	}) {
		return false
	}
	if r.Proto != l4.Any && r.Proto != p.proto {
		return false
	}
	if len(r.Ports) > 0 && !slices.ContainsFunc(r.Ports, func(pr l4.PortRange) bool { return pr.From <= p.port && p.port <= pr.To }) {
		return false
	}
	return true
}

// oracle picks the winning rule straight from the Spec, as nat's package doc
// states it (seed 001's selection): among the rules matching the packet, a
// named protocol beats any, then the longest matching source prefix (none
// counts as shortest), then listed ports beat all ports.
func oracle(ms []rules.Match, values []uint32, p packet) uint32 {
	best, bestKey := uint32(0), [3]int{-1, -2, -1}
	for i, m := range ms {
		if m.VIP != p.dst || m.Protocol != l4.Any && m.Protocol != p.proto {
			continue
		}
		if len(m.Ports) > 0 && !slices.ContainsFunc(m.Ports, func(pr l4.PortRange) bool { return pr.From <= p.port && p.port <= pr.To }) {
			continue
		}
		bits := -1
		for _, s := range m.Sources {
			if s.Contains(p.src) {
				bits = max(bits, s.Bits())
			}
		}
		if len(m.Sources) > 0 && bits < 0 {
			continue
		}
		key := [3]int{b2i(m.Protocol != l4.Any), bits, b2i(len(m.Ports) > 0)}
		if slices.Compare(key[:], bestKey[:]) > 0 {
			best, bestKey = values[i], key
		}
	}
	return best
}

func TestSteeringSeed001(t *testing.T) {
	rs := mustRender(t, rules.Spec{Marks: steering})
	vip := addr("198.51.100.1")
	for _, tc := range []struct {
		src  string
		port uint16
		want uint32
	}{
		{"203.0.113.5", 80, 0x102},  // inside /28 and /24: /28 wins
		{"203.0.113.77", 80, 0x101}, // inside /24 only
		{"192.0.2.1", 80, 0x100},    // outside every range: the parent
		{"203.0.113.5", 81, 0},      // no rule for port 81: no mark, a plain IPVS service may take it
	} {
		if got, _ := eval(rs, packet{addr(tc.src), vip, l4.TCP, tc.port}); got != tc.want {
			t.Errorf("client %s port %d: mark 0x%x, want 0x%x", tc.src, tc.port, got, tc.want)
		}
	}
}

// TestL3DefaultScenarios are seed 001's two coexistence scenarios.
func TestL3DefaultScenarios(t *testing.T) {
	vip := addr("198.51.100.1")
	l3 := rules.MarkRule{Match: rules.Match{VIP: vip}, Mark: 1}
	for _, tc := range []struct {
		name  string
		tcp   rules.MarkRule
		probe []packet
		want  []uint32
	}{
		{"scenario 1: tcp all ports", rules.MarkRule{Match: rules.Match{VIP: vip, Protocol: l4.TCP}, Mark: 2},
			[]packet{{addr("192.0.2.1"), vip, l4.TCP, 1234}, {addr("192.0.2.1"), vip, l4.UDP, 1234}}, []uint32{2, 1}},
		{"scenario 2: tcp 8080", rules.MarkRule{Match: rules.Match{VIP: vip, Protocol: l4.TCP, Ports: []l4.PortRange{port(8080)}}, Mark: 2},
			[]packet{{addr("192.0.2.1"), vip, l4.TCP, 8080}, {addr("192.0.2.1"), vip, l4.TCP, 80}, {addr("192.0.2.1"), vip, l4.UDP, 8080}}, []uint32{2, 1, 1}},
	} {
		rs := mustRender(t, rules.Spec{Marks: []rules.MarkRule{l3, tc.tcp}})
		for i, p := range tc.probe {
			if got, _ := eval(rs, p); got != tc.want[i] {
				t.Errorf("%s: %s %s:%d: mark %d, want %d", tc.name, p.proto, p.dst, p.port, got, tc.want[i])
			}
		}
	}
}

// TestRandomSpecsAgreeWithOracle renders random overlapping rule sets and
// checks first-match evaluation of the rendered chain against the oracle,
// for marks and for FULLNAT ct marks.
func TestRandomSpecsAgreeWithOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	vips := addrs("198.51.100.1", "198.51.100.2", "2001:db8::1")
	src4 := prefixes("10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.3.0/24", "10.1.2.128/25", "10.1.2.7/32", "192.168.0.0/16")
	src6 := prefixes("2001:db8:a::/48", "2001:db8:a:1::/64", "2001:db8:a:2::/64", "2001:db8:b::/48")
	protos := []l4.Protocol{l4.Any, l4.TCP, l4.UDP, l4.SCTP}
	portSets := [][]l4.PortRange{nil, {port(80)}, {port(80), port(443)}, {{From: 8000, To: 8099}}, {{From: 70, To: 90}, port(65535)}}
	randMatch := func() rules.Match {
		m := rules.Match{VIP: vips[r.IntN(len(vips))], Protocol: protos[r.IntN(len(protos))]}
		if m.Protocol != l4.Any {
			m.Ports = portSets[r.IntN(len(portSets))]
		}
		pool := src4
		if m.VIP.Is6() {
			pool = src6
		}
		for range r.IntN(3) {
			m.Sources = append(m.Sources, pool[r.IntN(len(pool))])
		}
		return m
	}
	clients4 := addrs("10.1.2.7", "10.1.2.200", "10.1.2.1", "10.1.3.9", "10.9.9.9", "192.168.5.5", "172.16.0.1")
	clients6 := addrs("2001:db8:a:1::5", "2001:db8:a:2::5", "2001:db8:a:3::5", "2001:db8:b::1", "2001:db8:c::1")
	ports := []uint16{80, 443, 8050, 65535, 22}
	checked := 0
	for range 3000 {
		var spec rules.Spec
		var markMatches, snatMatches []rules.Match
		var markValues, snatValues []uint32
		for i := range 1 + r.IntN(5) {
			m := randMatch()
			spec.Marks = append(spec.Marks, rules.MarkRule{Match: m, Mark: uint32(i + 1)})
			markMatches, markValues = append(markMatches, m), append(markValues, uint32(i+1))
		}
		for i := range r.IntN(3) {
			m := randMatch()
			to := addrs("192.0.2.1")
			if m.VIP.Is6() {
				to = addrs("2001:db8:ffff::1")
			}
			spec.SNAT = append(spec.SNAT, rules.SNATRule{Match: m, CtMark: uint32(0x10 + i), To: to})
			snatMatches, snatValues = append(snatMatches, m), append(snatValues, uint32(0x10+i))
		}
		rs, err := rules.Render(spec)
		if err != nil {
			continue // an ambiguous random spec: Render's conflict check, tested elsewhere
		}
		checked++
		for range 20 {
			p := packet{dst: vips[r.IntN(len(vips))], proto: protos[1+r.IntN(3)], port: ports[r.IntN(len(ports))]}
			if p.dst.Is4() {
				p.src = clients4[r.IntN(len(clients4))]
			} else {
				p.src = clients6[r.IntN(len(clients6))]
			}
			mark, ct := eval(rs, p)
			if want := oracle(markMatches, markValues, p); mark != want {
				t.Fatalf("packet %+v: mark 0x%x, oracle 0x%x\nspec %+v\n%s", p, mark, want, spec, rs)
			}
			if want := oracle(snatMatches, snatValues, p); ct != want {
				t.Fatalf("packet %+v: ct mark 0x%x, oracle 0x%x\nspec %+v\n%s", p, ct, want, spec, rs)
			}
		}
	}
	if checked < 1000 {
		t.Errorf("only %d of 3000 random specs rendered: the generator makes too many conflicts", checked)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
