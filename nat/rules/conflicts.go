package rules

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// conflicts finds entries that first-match order cannot decide between: the
// same VIP, protocol and source prefix, overlapping ports, different values.
// The errors come in the order of the entry pairs (a before b, then by b),
// whatever order the groups and sweeps below find them in.
//
// Comparing every pair took seconds at 10,000 FULLNAT services, on every
// reload: only entries sharing a conflict group can conflict, and within
// one, sorting the port ranges finds the overlapping ones in one sweep.
func conflicts(what string, es []entry) []error {
	groups := map[conflictGroup][]portItem{}
	for i, e := range es {
		key := conflictGroup{fam: e.fam, vip: e.vip, proto: e.proto, bits: e.bits, allPorts: e.ports == nil}
		items := []portItem{{from: 0, to: 65535, entry: i}} // all ports overlaps only all ports: a group of its own
		if e.ports != nil {
			items = items[:0]
			for _, r := range e.ports {
				items = append(items, portItem{from: r.From, to: r.To, entry: i})
			}
		}
		if e.bits < 0 {
			groups[key] = append(groups[key], items...)
			continue
		}
		// Entries with source prefixes conflict only where they share one.
		for _, src := range e.srcs {
			key.src = src
			groups[key] = append(groups[key], items...)
		}
	}
	var pairs [][2]int
	for _, items := range groups {
		pairs = overlappingPairs(es, items, pairs)
	}
	slices.SortFunc(pairs, func(x, y [2]int) int { return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1])) })
	pairs = slices.Compact(pairs) // a pair sharing several prefixes or port ranges is found once for each

	var errs []error
	for _, p := range pairs {
		a, b := es[p[0]], es[p[1]]
		from := "every client"
		if shared, ok := firstShared(a.srcs, b.srcs); ok {
			from = "clients in " + shared.String()
		}
		errs = append(errs, fmt.Errorf("%s and %s both match %s %s from %s with different %ss (0x%x, 0x%x)",
			a.name, b.name, a.proto, a.vip, from, what, a.value, b.value))
	}
	return errs
}

// conflictGroup is what two conflicting entries share. Entries without
// source prefixes (bits -1) leave src zero.
type conflictGroup struct {
	fam      Family
	vip      netip.Addr
	proto    l4.Protocol
	bits     int
	allPorts bool
	src      netip.Prefix
}

// portItem is one port range of the entry at index entry.
type portItem struct {
	from, to uint16
	entry    int
}

// overlappingPairs appends to pairs the index pairs (lower first) of the
// entries with different values whose ranges among items overlap. Sorted
// by start, a range overlaps exactly the earlier ranges that have not
// ended before it starts: the sweep compares only those.
func overlappingPairs(es []entry, items []portItem, pairs [][2]int) [][2]int {
	slices.SortFunc(items, func(x, y portItem) int {
		return cmp.Or(cmp.Compare(x.from, y.from), cmp.Compare(x.to, y.to), cmp.Compare(x.entry, y.entry))
	})
	var open []portItem
	for _, it := range items {
		open = slices.DeleteFunc(open, func(o portItem) bool { return o.to < it.from })
		for _, o := range open {
			if o.entry != it.entry && es[o.entry].value != es[it.entry].value {
				pairs = append(pairs, [2]int{min(o.entry, it.entry), max(o.entry, it.entry)})
			}
		}
		open = append(open, it)
	}
	return pairs
}

func firstShared(a, b []netip.Prefix) (netip.Prefix, bool) {
	for _, p := range a {
		if slices.Contains(b, p) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}
