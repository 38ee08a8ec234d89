package nat

import (
	"cmp"
	"net/netip"
	"slices"
)

// family is one of the two tables lvsd owns.
type family uint8

const (
	ipv4 family = iota
	ipv6
)

func familyOf(a netip.Addr) family {
	if a.Is4() {
		return ipv4
	}
	return ipv6
}

// nftName is the family's keyword in nft syntax ("ip", "ip6").
func (f family) nftName() string {
	if f == ipv4 {
		return "ip"
	}
	return "ip6"
}

// addrRange is an inclusive address range. Sets of source prefixes become
// ranges because the kernel stores interval sets as ranges: adjacent prefixes
// must be merged (an interval ending where the next starts is rejected), and
// nft then prints each range as a prefix when it is one.
type addrRange struct{ from, to netip.Addr }

func prefixRange(p netip.Prefix) addrRange {
	return addrRange{p.Addr(), lastAddr(p)}
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

// prefix returns r as a prefix if it is exactly one.
func (r addrRange) prefix() (netip.Prefix, bool) {
	for bits := r.from.BitLen(); bits >= 0; bits-- {
		p := netip.PrefixFrom(r.from, bits)
		if p.Masked() != p {
			return netip.Prefix{}, false // from is not aligned to this size or any larger one
		}
		if last := lastAddr(p); last == r.to {
			return p, true
		} else if last.Compare(r.to) > 0 {
			return netip.Prefix{}, false
		}
	}
	return netip.Prefix{}, false
}

// String prints r the way nft prints an interval: address, prefix or range.
func (r addrRange) String() string {
	if r.from == r.to {
		return r.from.String()
	}
	if p, ok := r.prefix(); ok {
		return p.String()
	}
	return r.from.String() + "-" + r.to.String()
}

// mergePrefixes turns prefixes into sorted, disjoint, non-adjacent ranges.
func mergePrefixes(ps []netip.Prefix) []addrRange {
	rs := make([]addrRange, len(ps))
	for i, p := range ps {
		rs[i] = prefixRange(p)
	}
	return mergeRanges(rs)
}

// mergePorts sorts port ranges and merges overlapping and adjacent ones.
func mergePorts(ps []PortRange) []PortRange {
	rs := slices.Clone(ps)
	slices.SortFunc(rs, func(a, b PortRange) int { return cmp.Compare(a.From, b.From) })
	var out []PortRange
	for _, r := range rs {
		if n := len(out); n > 0 && int(r.From) <= int(out[n-1].To)+1 {
			out[n-1].To = max(out[n-1].To, r.To)
			continue
		}
		out = append(out, r)
	}
	return out
}

func portsOverlap(a, b []PortRange) bool {
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
func consecutive(as []netip.Addr) (addrRange, bool) {
	s := slices.Clone(as)
	slices.SortFunc(s, netip.Addr.Compare)
	s = slices.Compact(s)
	for i := 1; i < len(s); i++ {
		if s[i-1].Next() != s[i] {
			return addrRange{}, false
		}
	}
	return addrRange{s[0], s[len(s)-1]}, true
}

func comparePorts(a, b []PortRange) int {
	return slices.CompareFunc(a, b, func(x, y PortRange) int {
		return cmp.Or(cmp.Compare(x.From, y.From), cmp.Compare(x.To, y.To))
	})
}
