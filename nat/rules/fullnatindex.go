package rules

import (
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// fullnatIndex answers FullNATEntry without going through the fullnat
// rules: a takeover's restore asks once per synced connection and an ECMP
// director once per flow record of its peers, and 10,000 FULLNAT services
// make 10,000 fullnat rules (map elements, walked as rules by
// Table.fullnatRules). It gives what the linear scan (fullnatScan)
// gives, rule order included: for each VIP and protocol, the port space is
// cut where a rule's ports start or end, and each piece lists the rules
// that cover it in chain order, up to the first that takes every client.
// A lookup is a map lookup, a binary search over the VIP's pieces and a
// walk of a few source-steered rules. It is immutable once built.
type fullnatIndex struct {
	tables []tableIndex // those of the ruleset, in its order
}

type tableIndex struct {
	family Family
	vips   map[netip.Addr]*vipIndex // by the rules' DAddr
	rules  []fullnatTarget          // by position in the fullnat chain
}

// fullnatTarget is what one fullnat rule gives the connections it matches.
type fullnatTarget struct {
	sources sourceSet // nil ranges: every client
	mark    uint32
	to      AddrRange // the SNAT range of mark
	snat    bool      // snat_marks has the mark; without it, no entry
}

type vipIndex struct {
	tcp, udp portIndex
}

// portIndex cuts the port space into pieces: piece i runs from starts[i] to
// the next start, and its candidate rules are rules[at[i]:at[i+1]].
type portIndex struct {
	starts []uint16
	at     []int32
	rules  []int32 // positions in the fullnat chain, ascending
}

// sourceSet holds the source ranges of a rule sorted by their start, with
// the largest end among each range and those before it: a contains a when
// the last range starting at or before a has such an end at or after a.
type sourceSet struct {
	from, maxTo []netip.Addr
}

func newFullNATIndex(tables []Table) *fullnatIndex {
	idx := &fullnatIndex{tables: make([]tableIndex, len(tables))}
	for i, t := range tables {
		idx.tables[i] = newTableIndex(t)
	}
	return idx
}

func newTableIndex(t Table) tableIndex {
	chain := t.fullnatRules()
	ti := tableIndex{family: t.Family, vips: map[netip.Addr]*vipIndex{}, rules: make([]fullnatTarget, len(chain))}
	snat := t.snatTargets()
	byVIP := map[netip.Addr][]int32{}
	var vips []netip.Addr
	for i, r := range chain {
		to, ok := snat[r.SetCtMark]
		ti.rules[i] = fullnatTarget{sources: newSourceSet(r.SAddr), mark: r.SetCtMark, to: to, snat: ok}
		if _, seen := byVIP[r.DAddr]; !seen {
			vips = append(vips, r.DAddr)
		}
		byVIP[r.DAddr] = append(byVIP[r.DAddr], int32(i))
	}
	for _, v := range vips {
		ti.vips[v] = &vipIndex{tcp: newPortIndex(chain, byVIP[v], l4.TCP), udp: newPortIndex(chain, byVIP[v], l4.UDP)}
	}
	return ti
}

func newSourceSet(rs []AddrRange) sourceSet {
	if len(rs) == 0 {
		return sourceSet{}
	}
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b AddrRange) int { return a.From.Compare(b.From) })
	s := sourceSet{from: make([]netip.Addr, len(rs)), maxTo: make([]netip.Addr, len(rs))}
	for i, r := range rs {
		s.from[i], s.maxTo[i] = r.From, r.To
		if i > 0 && s.maxTo[i-1].Compare(r.To) > 0 {
			s.maxTo[i] = s.maxTo[i-1]
		}
	}
	return s
}

// all reports whether the set takes every client (the rule has no saddr).
func (s sourceSet) all() bool { return s.from == nil }

func (s sourceSet) contains(a netip.Addr) bool {
	if s.all() {
		return true
	}
	// n ranges start at or before a.
	n, _ := slices.BinarySearchFunc(s.from, a, func(from, a netip.Addr) int {
		if from.Compare(a) <= 0 {
			return -1
		}
		return 1
	})
	return n > 0 && a.Compare(s.maxTo[n-1]) <= 0
}

// newPortIndex indexes the rules at positions candidates (ascending) of
// chain that packets of protocol proto can match.
func newPortIndex(chain []Rule, candidates []int32, proto l4.Protocol) portIndex {
	// At each port where the rules covering it change, the rules that
	// start covering it and those that stop.
	type event struct {
		port   int // up to 65536: the end of the port space
		rule   int32
		starts bool
	}
	var events []event
	for _, i := range candidates {
		r := chain[i]
		if r.Proto != l4.Any && r.Proto != proto {
			continue
		}
		ports := []l4.PortRange{{From: 0, To: 65535}}
		if len(r.Ports) > 0 {
			// Merged, so that the ranges of one rule neither overlap
			// nor touch: each port is covered once or not at all.
			ports = mergePorts(slices.DeleteFunc(slices.Clone(r.Ports), func(p l4.PortRange) bool { return p.From > p.To }))
		}
		for _, p := range ports {
			events = append(events, event{int(p.From), i, true}, event{int(p.To) + 1, i, false})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return a.port - b.port })

	var pi portIndex
	var covering []int32 // ascending chain positions
	for e := 0; e < len(events); {
		port := events[e].port
		for ; e < len(events) && events[e].port == port; e++ {
			at, _ := slices.BinarySearch(covering, events[e].rule)
			if events[e].starts {
				covering = slices.Insert(covering, at, events[e].rule)
			} else {
				covering = slices.Delete(covering, at, at+1)
			}
		}
		if port > 65535 {
			break
		}
		// Rules after the first one that takes every client never match.
		n := len(covering)
		for k, i := range covering {
			if len(chain[i].SAddr) == 0 {
				n = k + 1
				break
			}
		}
		if last := len(pi.starts) - 1; last >= 0 && slices.Equal(pi.rules[pi.at[last]:], covering[:n]) {
			continue // the same rules as the piece before: one piece
		}
		if len(pi.starts) == 0 && port > 0 {
			pi.starts, pi.at = append(pi.starts, 0), append(pi.at, 0) // no rule below the first
		}
		pi.starts = append(pi.starts, uint16(port))
		pi.at = append(pi.at, int32(len(pi.rules)))
		pi.rules = append(pi.rules, covering[:n]...)
	}
	pi.at = append(pi.at, int32(len(pi.rules)))
	return pi
}

// lookup returns the chain positions of the rules that may match port, in
// chain order.
func (pi portIndex) lookup(port uint16) []int32 {
	n, found := slices.BinarySearch(pi.starts, port)
	if !found {
		n-- // the piece starting before port
	}
	if n < 0 {
		return nil
	}
	return pi.rules[pi.at[n]:pi.at[n+1]]
}

// lookup finds the first rule of the table that matches a connection of
// proto (TCP or UDP) from client to vip; matched is false if none does.
func (ti *tableIndex) lookup(proto l4.Protocol, client netip.Addr, vip netip.AddrPort) (target *fullnatTarget, matched bool) {
	v := ti.vips[vip.Addr()]
	if v == nil {
		return nil, false
	}
	pi := v.tcp
	if proto == l4.UDP {
		pi = v.udp
	}
	for _, i := range pi.lookup(vip.Port()) {
		if t := &ti.rules[i]; t.sources.contains(client) {
			return t, true
		}
	}
	return nil, false
}
