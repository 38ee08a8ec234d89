package rules

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// Family is one of the two tables lvsd owns.
type Family uint8

// The families, in the order of Ruleset.Tables.
const (
	IPv4 Family = iota
	IPv6
)

func familyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// NFTName is the family's keyword in nft syntax ("ip", "ip6").
func (f Family) NFTName() string {
	if f == IPv4 {
		return "ip"
	}
	return "ip6"
}

// AddrRange is an inclusive address range. Sets of source prefixes become
// ranges because the kernel stores interval sets as ranges: adjacent prefixes
// must be merged (an interval ending where the next starts is rejected), and
// nft then prints each range as a prefix when it is one.
type AddrRange struct{ From, To netip.Addr }

func prefixRange(p netip.Prefix) AddrRange {
	return AddrRange{p.Addr(), lastAddr(p)}
}

// lastAddr returns the highest address in p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Prefix returns r as a prefix if it is exactly one.
func (r AddrRange) Prefix() (netip.Prefix, bool) {
	for bits := r.From.BitLen(); bits >= 0; bits-- {
		p := netip.PrefixFrom(r.From, bits)
		if p.Masked() != p {
			return netip.Prefix{}, false // from is not aligned to this size or any larger one
		}
		if last := lastAddr(p); last == r.To {
			return p, true
		} else if last.Compare(r.To) > 0 {
			return netip.Prefix{}, false
		}
	}
	return netip.Prefix{}, false
}

// String prints r the way nft prints an interval: address, prefix or range.
func (r AddrRange) String() string {
	if r.From == r.To {
		return r.From.String()
	}
	if p, ok := r.Prefix(); ok {
		return p.String()
	}
	return r.From.String() + "-" + r.To.String()
}

// mergePrefixes turns prefixes into sorted, disjoint, non-adjacent ranges.
func mergePrefixes(ps []netip.Prefix) []AddrRange {
	rs := make([]AddrRange, len(ps))
	for i, p := range ps {
		rs[i] = prefixRange(p)
	}
	return mergeRanges(rs)
}

// mergePorts sorts port ranges and merges overlapping and adjacent ones.
func mergePorts(ps []l4.PortRange) []l4.PortRange {
	rs := slices.Clone(ps)
	slices.SortFunc(rs, func(a, b l4.PortRange) int { return cmp.Compare(a.From, b.From) })
	var out []l4.PortRange
	for _, r := range rs {
		if n := len(out); n > 0 && int(r.From) <= int(out[n-1].To)+1 {
			out[n-1].To = max(out[n-1].To, r.To)
			continue
		}
		out = append(out, r)
	}
	return out
}

func portsOverlap(a, b []l4.PortRange) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b) // "all ports" overlaps only "all ports": order settles the rest
	}
	for _, x := range a {
		for _, y := range b {
			if x.From <= y.To && y.From <= x.To {
				return true
			}
		}
	}
	return false
}

// consecutive reports whether as, once sorted and deduplicated, is one
// unbroken run of addresses, and returns the run.
func consecutive(as []netip.Addr) (AddrRange, bool) {
	s := slices.Clone(as)
	slices.SortFunc(s, netip.Addr.Compare)
	s = slices.Compact(s)
	for i := 1; i < len(s); i++ {
		if s[i-1].Next() != s[i] {
			return AddrRange{}, false
		}
	}
	return AddrRange{s[0], s[len(s)-1]}, true
}

func comparePorts(a, b []l4.PortRange) int {
	return slices.CompareFunc(a, b, func(x, y l4.PortRange) int {
		return cmp.Or(cmp.Compare(x.From, y.From), cmp.Compare(x.To, y.To))
	})
}
