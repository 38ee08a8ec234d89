package rules

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"strconv"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// The FULLNAT rules are lookups, so that a packet's cost does not grow
// with the number of services: one rule per service in the fullnat chain
// was walked by every packet to a VIP, and one SNAT rule per ct mark by
// every new connection. The rules that steer by source address stay rules
// (a map keyed by the source would need the ranges of several prefix
// lengths cut into disjoint pieces); the maps take the rules for every
// client, at the position of the first of them in the chain, which keeps
// the order that picks between overlapping rules.

// Names of the FULLNAT maps and the prefix of the SNAT chains (snat_0 ...).
const (
	MapFullNATPorts  = "fullnat_ports"  // VIP . protocol . port -> ct mark
	MapFullNATRanges = "fullnat_ranges" // VIP . protocol . port range -> ct mark
	MapFullNATAny    = "fullnat_any"    // VIP -> ct mark, for protocol any
	MapSNAT          = "snat_marks"     // ct mark -> goto snat_N
	ChainSNATPrefix  = "snat_"
	fullnatPortsType = " . inet_proto . inet_service : mark"
)

// MarkMap names the map a rule's "ct mark set ... map" looks up.
type MarkMap uint8

// The maps: none, or the key they are looked up with.
const (
	NoMarkMap MarkMap = iota
	// ByPort: "ct mark set ip daddr . meta l4proto . th dport map @fullnat_ports".
	ByPort
	// ByPortRange: the same key in "map @fullnat_ranges".
	ByPortRange
	// ByVIP: "ct mark set ip daddr map @fullnat_any".
	ByVIP
)

// PortMark is an element of fullnat_ports (Ports one port) or
// fullnat_ranges: the connections to VIP over Proto (TCP, UDP or SCTP) on
// Ports get ct mark Mark. The elements of a table never overlap, in one
// map or across both, so the order of the two lookups does not matter.
//
// Single ports have a hash map of their own: the kernel's map for
// concatenated ranges (pipapo) walks every element that matches the key's
// leading fields, so 10,000 services on one VIP cost a packet to that VIP
// 20 times a lone service's path; the hash costs the same for any number.
type PortMark struct {
	VIP   netip.Addr
	Proto l4.Protocol
	Ports l4.PortRange
	Mark  uint32
}

// VIPMark is an element of fullnat_any: every connection to VIP gets Mark.
type VIPMark struct {
	VIP  netip.Addr
	Mark uint32
}

// SNATMark is an element of snat_marks: connections with ct mark Mark go
// to chain snat_<Chain>, which source-NATs them to SNATChains[Chain].
type SNATMark struct {
	Mark  uint32
	Chain int
}

// SNATChainName is the name of the chain that source-NATs to the i-th
// range of Table.SNATChains.
func SNATChainName(i int) string { return ChainSNATPrefix + strconv.Itoa(i) }

// fullnatChain fills t.FullNAT and its maps from the fullnat entries of
// the table's family, in chain order (entry.compare).
func (t *Table) fullnatChain(es []entry) {
	var byPort []entry // every client, named protocol
	at := -1
	anyVIP := map[netip.Addr]uint32{}
	for _, e := range es {
		switch {
		case e.bits >= 0:
			t.FullNAT = append(t.FullNAT, e.rule(Rule{SetCtMark: e.value, Verdict: Return}))
		case e.proto != l4.Any:
			if byPort == nil {
				at = len(t.FullNAT) // the lookups go here
			}
			byPort = append(byPort, e)
		default:
			if len(anyVIP) == 0 {
				t.FullNAT = append(t.FullNAT, Rule{SetCtMarkMap: ByVIP, Verdict: Return})
			}
			if _, ok := anyVIP[e.vip]; !ok { // the first one wins, as in a chain
				anyVIP[e.vip] = e.value
				t.VIPMarks = append(t.VIPMarks, VIPMark{VIP: e.vip, Mark: e.value})
			}
		}
	}
	slices.SortFunc(t.VIPMarks, func(a, b VIPMark) int { return a.VIP.Compare(b.VIP) })
	var lookups []Rule
	for _, m := range portMarks(byPort) {
		if m.Ports.From == m.Ports.To {
			t.PortMarks = append(t.PortMarks, m)
		} else {
			t.RangeMarks = append(t.RangeMarks, m)
		}
	}
	slices.SortFunc(t.PortMarks, nftHashOrder)
	if t.PortMarks != nil {
		lookups = append(lookups, Rule{SetCtMarkMap: ByPort, Verdict: Return})
	}
	if t.RangeMarks != nil {
		lookups = append(lookups, Rule{SetCtMarkMap: ByPortRange, Verdict: Return})
	}
	if at >= 0 {
		t.FullNAT = slices.Insert(t.FullNAT, at, lookups...)
	}
}

// portMarks cuts the ports of each VIP and protocol into disjoint pieces,
// each with the ct mark of the first entry (in chain order) that covers it.
// Render has refused entries that chain order cannot decide between, so
// among the entries of one VIP and protocol for every client, those with
// listed ports that overlap share their mark, and they all come before the
// one for all ports, which takes what they leave.
func portMarks(es []entry) []PortMark {
	type group struct {
		vip   netip.Addr
		proto l4.Protocol
	}
	listed := map[group][]PortMark{}
	all := map[group]uint32{}
	seen := map[group]bool{}
	var groups []group
	for _, e := range es {
		g := group{e.vip, e.proto}
		if !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
		if e.ports == nil {
			if _, ok := all[g]; !ok {
				all[g] = e.value
			}
			continue
		}
		for _, p := range e.ports {
			listed[g] = append(listed[g], PortMark{VIP: e.vip, Proto: e.proto, Ports: p, Mark: e.value})
		}
	}
	var out []PortMark
	for _, g := range groups {
		pieces := listed[g]
		slices.SortFunc(pieces, func(a, b PortMark) int { return cmp.Compare(a.Ports.From, b.Ports.From) })
		var merged []PortMark
		for _, p := range pieces {
			if n := len(merged); n > 0 && int(p.Ports.From) <= int(merged[n-1].Ports.To)+1 && p.Mark == merged[n-1].Mark {
				merged[n-1].Ports.To = max(merged[n-1].Ports.To, p.Ports.To)
				continue
			}
			merged = append(merged, p)
		}
		if mark, ok := all[g]; ok {
			merged = fillGaps(merged, PortMark{VIP: g.vip, Proto: g.proto, Mark: mark})
		}
		out = append(out, merged...)
	}
	slices.SortFunc(out, func(a, b PortMark) int {
		return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Ports.From, b.Ports.From))
	})
	return out
}

// fillGaps adds pieces with fill's mark over the ports that the sorted,
// disjoint pieces leave, merging each with a neighbour of the same mark.
func fillGaps(pieces []PortMark, fill PortMark) []PortMark {
	var out []PortMark
	add := func(p PortMark) {
		if n := len(out); n > 0 && out[n-1].Mark == p.Mark && int(out[n-1].Ports.To)+1 == int(p.Ports.From) {
			out[n-1].Ports.To = p.Ports.To
			return
		}
		out = append(out, p)
	}
	next := 0 // the first port not yet covered
	for _, p := range pieces {
		if int(p.Ports.From) > next {
			gap := fill
			gap.Ports = l4.PortRange{From: uint16(next), To: p.Ports.From - 1}
			add(gap)
		}
		add(p)
		next = int(p.Ports.To) + 1
	}
	if next <= 65535 {
		gap := fill
		gap.Ports = l4.PortRange{From: uint16(next), To: 65535}
		add(gap)
	}
	return out
}

// snatChains fills t.Post, t.SNATMarks and t.SNATChains: one chain per
// distinct SNAT range, and the map from each ct mark to its chain. A
// verdict map, not "snat to ct mark map @m" with ranges as the map's data:
// nft marks such data as ranges in the map's user data, which
// google/nftables v0.3.0 cannot write, and would list the map wrongly.
// Services commonly share their source addresses: few chains.
func (t *Table) snatChains(post map[uint32]snatTarget) {
	if len(post) == 0 {
		return
	}
	index := map[AddrRange]int{}
	for _, s := range post {
		index[s.to] = 0
	}
	for r := range index {
		t.SNATChains = append(t.SNATChains, r)
	}
	slices.SortFunc(t.SNATChains, func(a, b AddrRange) int { return cmp.Or(a.From.Compare(b.From), a.To.Compare(b.To)) })
	for i, r := range t.SNATChains {
		index[r] = i
	}
	for mark, s := range post {
		t.SNATMarks = append(t.SNATMarks, SNATMark{Mark: mark, Chain: index[s.to]})
	}
	slices.SortFunc(t.SNATMarks, func(a, b SNATMark) int { return cmp.Compare(a.Mark, b.Mark) })
	t.Post = []Rule{{CtMarkVmap: true}}
}

// snatRule is the one rule of chain snat_<i>.
func (t Table) snatRule(i int) Rule { return Rule{SNAT: t.SNATChains[i]} }

// fullnatRules are the fullnat chain's rules with each map lookup replaced
// by one rule per element, in place: the chain as a walk of rules, which
// the index and FullNATVIPs work on. The elements of a map are disjoint,
// so their order does not matter.
func (t Table) fullnatRules() []Rule {
	var out []Rule
	for _, r := range t.FullNAT {
		switch r.SetCtMarkMap {
		case ByPort, ByPortRange:
			for _, m := range t.portMarks(r.SetCtMarkMap) {
				out = append(out, Rule{DAddr: m.VIP, Proto: m.Proto, Ports: []l4.PortRange{m.Ports}, SetCtMark: m.Mark, Verdict: Return})
			}
		case ByVIP:
			for _, m := range t.VIPMarks {
				out = append(out, Rule{DAddr: m.VIP, SetCtMark: m.Mark, Verdict: Return})
			}
		default:
			out = append(out, r)
		}
	}
	return out
}

// portMarks are the elements of the map that m names.
func (t Table) portMarks(m MarkMap) []PortMark {
	if m == ByPortRange {
		return t.RangeMarks
	}
	return t.PortMarks
}

// snatTargets maps each ct mark of snat_marks to its SNAT range (the
// first element's, should a hand-made table repeat a mark).
func (t Table) snatTargets() map[uint32]AddrRange {
	out := make(map[uint32]AddrRange, len(t.SNATMarks))
	seen := make(map[uint32]bool, len(t.SNATMarks))
	for _, m := range t.SNATMarks {
		if !seen[m.Mark] && m.Chain >= 0 && m.Chain < len(t.SNATChains) {
			out[m.Mark] = t.SNATChains[m.Chain]
		}
		seen[m.Mark] = true
	}
	return out
}

// nftHashOrder orders the elements of fullnat_ports as nft 1.0.6 lists a
// map that is no interval map: it sorts the keys, a concatenation as the
// number its fields' bytes (address, protocol, port; unpadded) make in
// host byte order (concat_expr_msort_value), little-endian on the hosts
// lvsd runs on: from the last byte to the first.
func nftHashOrder(a, b PortMark) int {
	key := func(m PortMark) []byte {
		return binary.BigEndian.AppendUint16(append(m.VIP.AsSlice(), byte(m.Proto)), m.Ports.From)
	}
	ka, kb := key(a), key(b)
	if len(ka) != len(kb) {
		return cmp.Compare(len(ka), len(kb))
	}
	for i := len(ka) - 1; i >= 0; i-- {
		if c := cmp.Compare(ka[i], kb[i]); c != 0 {
			return c
		}
	}
	return 0
}
