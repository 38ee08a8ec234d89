package rules

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// Render checks spec and turns it into the Ruleset that implements it. It
// is pure: the same Spec always gives the same Ruleset, whatever the order
// of its rules. The error lists every problem found.
//
// Both tables always exist, even without rules: they hold the set of VIPs,
// whose comment carries the ruleset's digest (see nat.Kernel.Apply).
func Render(spec Spec) (Ruleset, error) {
	c, errs := collect(spec)
	errs = append(errs, conflicts("packet mark", c.marks)...)
	errs = append(errs, conflicts("ct mark", c.snats)...)
	if len(errs) > 0 {
		return Ruleset{}, errors.Join(errs...)
	}
	slices.SortFunc(c.marks, entry.compare)
	slices.SortFunc(c.snats, entry.compare)
	same := func(a, b entry) bool { return a.compare(b) == 0 }
	c.marks = slices.CompactFunc(c.marks, same)
	c.snats = slices.CompactFunc(c.snats, same)
	var rs Ruleset
	for _, fam := range []Family{IPv4, IPv6} {
		rs.tables = append(rs.tables, c.table(fam, spec))
	}
	rs.seal()
	rs.fullnat = newFullNATIndex(rs.tables)
	return rs, nil
}

// collected are the rules of a Spec expanded to entries, the SNAT target
// of each ct mark by family, and the VIPs of each clamped MSS by family.
type collected struct {
	marks, snats []entry
	post         map[Family]map[uint32]snatTarget
	mss          map[Family]map[uint16][]AddrRange
}

// collect checks and expands spec's rules; the errors name each bad rule.
func collect(spec Spec) (collected, []error) {
	var errs []error
	c := collected{post: map[Family]map[uint32]snatTarget{IPv4: {}, IPv6: {}},
		mss: map[Family]map[uint16][]AddrRange{IPv4: {}, IPv6: {}}}
	for i, r := range spec.Marks {
		name := describe("mark", i, r.Comment, r.Match)
		fam, err := r.check()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		c.marks = append(c.marks, expand(fam, name, r.Match, r.Mark, r.Comment)...)
	}
	if spec.ClusterPort != nil {
		if err := spec.ClusterPort.check(); err != nil {
			errs = append(errs, fmt.Errorf("cluster port: %w", err))
		}
	}
	if spec.SyncPorts != nil && !spec.SyncGroup.Is4() {
		errs = append(errs, fmt.Errorf("sync guard: group %v is not an IPv4 address", spec.SyncGroup))
	}
	for i, r := range spec.SNAT {
		name := describe("snat", i, r.Comment, r.Match)
		fam, to, err := r.check()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if prev, ok := c.post[fam][r.CtMark]; ok && prev.to != to {
			errs = append(errs, fmt.Errorf("%s: ct mark 0x%x already SNATs to %s in %s", name, r.CtMark, prev.to, prev.name))
			continue
		}
		if _, ok := c.post[fam][r.CtMark]; !ok {
			c.post[fam][r.CtMark] = snatTarget{to: to, name: name}
		}
		c.snats = append(c.snats, expand(fam, name, r.Match, r.CtMark, r.Comment)...)
	}
	clamped := map[netip.Addr]uint16{}
	for i, m := range spec.ClampMSS {
		fam, err := m.check()
		if err != nil {
			errs = append(errs, fmt.Errorf("mss clamp %d: %w", i, err))
			continue
		}
		if prev, ok := clamped[m.VIP]; ok && prev != m.MSS {
			errs = append(errs, fmt.Errorf("mss clamp %d: %s is already clamped to %d", i, m.VIP, prev))
			continue
		}
		clamped[m.VIP] = m.MSS
		c.mss[fam][m.MSS] = append(c.mss[fam][m.MSS], AddrRange{m.VIP, m.VIP})
	}
	return c, errs
}

// table renders the table of family fam.
func (c collected) table(fam Family, spec Spec) Table {
	t := Table{Family: fam}
	for _, e := range c.marks {
		if e.fam == fam {
			t.Pre = append(t.Pre, e.rule(Rule{SetMark: e.value, Verdict: Accept}))
			t.VIPs = append(t.VIPs, e.vip)
		}
	}
	var fullnat []entry
	for _, e := range c.snats {
		if e.fam == fam {
			fullnat = append(fullnat, e)
			t.VIPs = append(t.VIPs, e.vip)
		}
	}
	t.fullnatChain(fullnat)
	t.snatChains(c.post[fam])
	snatTo := slices.Clone(t.SNATChains)
	for _, a := range spec.GuardSNAT {
		if familyOf(a) == fam {
			snatTo = append(snatTo, AddrRange{From: a, To: a})
		}
	}
	head := []Rule{{NotVIP: true, Verdict: Accept}}
	if t.FullNAT != nil {
		head = append(head, Rule{Verdict: JumpFullNAT})
	}
	if t.Pre != nil || t.FullNAT != nil {
		t.Pre = append(head, t.Pre...)
	}
	slices.SortFunc(t.VIPs, netip.Addr.Compare)
	t.VIPs = slices.Compact(t.VIPs)
	if c := spec.ClusterPort; c != nil {
		rules, meter := clusterPortRules(fam, *c)
		t.Input = append(t.Input, rules...)
		if meter != nil {
			t.Meters = append(t.Meters, *meter)
		}
	}
	if guard := subtractAddrs(mergeRanges(snatTo), t.VIPs); len(guard) > 0 {
		t.Input = append(t.Input, guardRule(guard))
	}
	if fam == IPv4 && len(spec.SyncPorts) > 0 {
		t.Output = []Rule{syncGuardRule(spec.SyncGroup, spec.SyncPorts)}
	}
	if fam == IPv6 && spec.DropRedirects6 {
		t.Output = []Rule{{Redirect: true, Verdict: Drop, Comment: "no redirects around the reverse NAT"}}
	}
	for _, mss := range slices.Sorted(maps.Keys(c.mss[fam])) {
		t.Output = append(t.Output, clampRule(mergeRanges(c.mss[fam][mss]), mss))
	}
	return t
}

// clampRule caps the MSS that SYN-ACKs from the VIPs announce, so that the
// clients' segments fit through the tunnel the directors wrap them in.
// Only a larger MSS is rewritten: a client's smaller one stays.
func clampRule(vips []AddrRange, mss uint16) Rule {
	return Rule{SAddr: vips, SynAck: true, MSSAbove: mss, SetMSS: mss, Comment: "the tunnel's MTU"}
}

// guardRule keeps packets that belong to no connection away from the local
// stack of a SNAT address. Every packet a real server sends to a SNAT
// address should be the reply of a source-NATed connection, which conntrack
// translates back to the client in prerouting, so it is forwarded and never
// reaches input. One that reaches input found no conntrack entry: on a
// director that just took the addresses over, the reply of a connection
// whose entry was not restored (yet). The local stack would answer it with
// a reset and kill the connection; dropped, the real server retransmits and
// may meet the restored entry. The filter hook runs before conntrack
// confirms the packet's new entry, so the drop also keeps a bogus entry
// (real server -> SNAT address) from blocking the restore of the real one.
// Invalid packets (no entry either) are dropped for the same reason; other
// protocols (ICMP) pass.
func guardRule(to []AddrRange) Rule {
	return Rule{DAddrs: to, Protos: []l4.Protocol{l4.TCP, l4.UDP, l4.SCTP}, CtState: CtStateInvalid | CtStateNew,
		Verdict: Drop, Comment: "SNAT addresses take only replies"}
}

// syncGuardRule keeps other users away from the IPVS sync daemons on lo:
// the backup daemon applies whatever reaches its port unauthenticated, and
// what reaches the master's port is relayed to every director. Only root
// (lvsd's relay; the kernel's own master socket) may send there.
func syncGuardRule(group netip.Addr, ports []uint16) Rule {
	var pr []l4.PortRange
	for _, p := range ports {
		pr = append(pr, l4.PortRange{From: p, To: p})
	}
	// Merged: adjacent ranges in one interval set break its lookups.
	return Rule{OIF: "lo", DAddr: group, Proto: l4.UDP, Ports: mergePorts(pr), NotRoot: true, Verdict: Drop,
		Comment: "only root feeds the IPVS sync daemons"}
}

// mergeRanges sorts ranges and merges overlapping and adjacent ones (an
// interval set rejects an interval that ends where the next begins).
func mergeRanges(rs []AddrRange) []AddrRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b AddrRange) int { return a.From.Compare(b.From) })
	var out []AddrRange
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if next := last.To.Next(); !next.IsValid() || r.From.Compare(next) <= 0 {
				if r.To.Compare(last.To) > 0 {
					last.To = r.To
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// subtractAddrs removes addrs (sorted) from the sorted, disjoint ranges: a
// SNAT address that is also a VIP must take new connections.
func subtractAddrs(rs []AddrRange, addrs []netip.Addr) []AddrRange {
	var out []AddrRange
	for _, r := range rs {
		for _, a := range addrs {
			if a.Compare(r.From) < 0 || a.Compare(r.To) > 0 {
				continue
			}
			if a != r.From {
				out = append(out, AddrRange{r.From, a.Prev()})
			}
			if a == r.To {
				r = AddrRange{} // used up
				break
			}
			r.From = a.Next()
		}
		if r.From.IsValid() {
			out = append(out, r)
		}
	}
	return out
}

// snatTarget is where the SNAT rules sharing one ct mark translate to.
type snatTarget struct {
	to   AddrRange
	name string // first rule with this mark, for errors
}

// entry is one rendered classification rule: a MarkRule or SNATRule, or the
// part of it for the source prefixes of one length. Splitting by prefix
// length lets first-match order implement longest-prefix match across rules.
type entry struct {
	fam     Family
	name    string // the Spec rule, for errors
	vip     netip.Addr
	proto   l4.Protocol
	ports   []l4.PortRange // merged; nil = all ports
	bits    int            // source prefix length; -1 = every client
	srcs    []netip.Prefix
	value   uint32 // mark or ct mark
	comment string
}

func expand(fam Family, name string, m Match, value uint32, comment string) []entry {
	base := entry{fam: fam, name: name, vip: m.VIP, proto: m.Protocol, bits: -1, value: value, comment: comment}
	if len(m.Ports) > 0 {
		base.ports = mergePorts(m.Ports)
	}
	if len(m.Sources) == 0 {
		return []entry{base}
	}
	byBits := map[int][]netip.Prefix{}
	for _, p := range m.Sources {
		byBits[p.Bits()] = append(byBits[p.Bits()], p)
	}
	var out []entry
	// Longest first, as entry.compare orders them: in map order, the
	// conflicts between two rules with several prefix lengths came out in
	// a different order on every Render.
	for _, bits := range slices.Backward(slices.Sorted(maps.Keys(byBits))) {
		ps := byBits[bits]
		e := base
		e.bits = bits
		slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		e.srcs = slices.Compact(ps)
		out = append(out, e)
	}
	return out
}

// compare orders entries most specific first: a named protocol before any
// protocol, longer source prefixes before shorter ones before none, listed
// ports before all ports; the rest only makes the order deterministic.
func (a entry) compare(b entry) int {
	return cmp.Or(
		cmp.Compare(a.fam, b.fam),
		cmp.Compare(b2i(a.proto == l4.Any), b2i(b.proto == l4.Any)),
		cmp.Compare(b.bits, a.bits),
		cmp.Compare(b2i(a.ports == nil), b2i(b.ports == nil)),
		a.vip.Compare(b.vip),
		cmp.Compare(a.proto, b.proto),
		comparePorts(a.ports, b.ports),
		slices.CompareFunc(a.srcs, b.srcs, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) }),
		cmp.Compare(a.value, b.value),
		strings.Compare(a.comment, b.comment),
	)
}

func (e entry) rule(r Rule) Rule {
	r.DAddr = e.vip
	r.SAddr = mergePrefixes(e.srcs)
	r.Proto = e.proto
	r.Ports = e.ports
	r.Comment = e.comment
	return r
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
