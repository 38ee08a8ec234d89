package servicesdir

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/config/yamldoc"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// checkSet finds conflicts between services: the same name twice, or two
// services claiming the same VIP, protocol and port for the same clients.
// Each service is reported at most once, for its first conflict with a
// service read before it. The work is O(n log n) in the number of port
// ranges, so that a file of ten thousand services checks as fast as one.
func checkSet(all []*config.Service, errs *config.List) {
	every := make([]int, len(all))
	for i := range every {
		every[i] = i
	}
	checkAmong(all, every, every, errs)
}

// checkConflicts checks a set for conflicts: with scoped (the services not
// at fresh passed together before), the fresh ones against the others,
// unless more than an eighth are fresh; else the whole set. near, when not
// nil, returns the indexes of the other services a fresh one may conflict
// with (neighbours.near); without it they are found by a walk over all.
func checkConflicts(all []*config.Service, fresh []int, scoped bool, near func() []int, errs *config.List) {
	switch {
	case !scoped || len(fresh) > len(all)/8:
		checkSet(all, errs)
	case len(fresh) > 0:
		var among []int // nil: all
		if near != nil {
			among = mergeSorted(fresh, near())
		}
		checkChanged(all, fresh, among, errs)
	}
}

// checkChanged is checkSet for a set in which only the services at fresh
// (indexes into all, in order) may conflict: the others passed checkSet
// together before. Every new conflict involves a fresh service, so only
// the services that share a fresh one's name, or its VIP and some of its
// ports, are looked at: an edit among 10,000 services checks a handful.
// They are found among the services at among (sorted indexes, fresh ones
// included: a superset), or among all when it is nil. A service is reported as checkSet reports it; which of
// several services it conflicts with the message names may differ, as it
// may between two runs of checkSet (clients groups are visited in map
// order).
func checkChanged(all []*config.Service, fresh, among []int, errs *config.List) {
	freshNames := map[string]bool{}
	var claims []clientClaim // the fresh services' claims
	for _, i := range fresh {
		freshNames[all[i].Name] = true
		eachClaim(all[i], func(k clients, r l4.PortRange) bool {
			claims = append(claims, clientClaim{clients: k, r: r, proto: all[i].Protocol})
			return true
		})
	}
	names := config.NamesOf(freshNames)
	var byName, byClaim []int
	consider := func(i int) {
		s := all[i]
		if names.Has(s.Name) {
			byName = append(byName, i)
		}
		if overlapsAny(s, claims) {
			byClaim = append(byClaim, i)
		}
	}
	if among == nil {
		for i := range all {
			consider(i)
		}
	} else {
		for _, i := range among {
			consider(i)
		}
	}
	checkAmong(all, byName, byClaim, errs)
}

// mergeSorted merges two sorted lists of distinct indexes into one.
func mergeSorted(a, b []int) []int {
	out := make([]int, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0] < b[0]:
			out, a = append(out, a[0]), a[1:]
		case b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// clientClaim is one port range a service claims for some of a VIP's
// clients, on its protocol.
type clientClaim struct {
	clients
	r     l4.PortRange
	proto string
}

// overlapsAny reports whether s claims a port of claims' clients on a
// protocol that meets theirs (its own claims included): s is a service a
// fresh one may conflict with, or the fresh one itself. It runs for every
// service of the set, so it allocates nothing.
func overlapsAny(s *config.Service, claims []clientClaim) bool {
	for _, c := range claims {
		if c.vip != s.VIP || !(s.Protocol == c.proto || s.Protocol == "any" || c.proto == "any") {
			continue
		}
		overlaps := !eachClaim(s, func(k clients, r l4.PortRange) bool {
			return k != c.clients || r.To < c.r.From || c.r.To < r.From // go on while they do not overlap
		})
		if overlaps {
			return true
		}
	}
	return false
}

// checkAmong runs checkSet's checks on the services at byName (for names)
// and at byClaim (for VIPs, announcements and ports), indexes into all in
// order.
func checkAmong(all []*config.Service, byName, byClaim []int, errs *config.List) {
	// Indexes into all, not copies: a Service is large, and a reload checks
	// 10,000 of them.
	names := make(map[string]int, len(byName))
	for _, i := range byName {
		s := all[i]
		if j, ok := names[s.Name]; ok {
			prev := all[j]
			*errs = append(*errs, &config.Error{File: s.File, Line: s.Line, Col: 1,
				Msg: fmt.Sprintf("service %q is already defined at %s:%d", yamldoc.Cut(s.Name), prev.File, prev.Line)})
			continue
		}
		names[s.Name] = i
	}
	announced := map[netip.Addr]int{} // the first service of each VIP with announce
	for _, i := range byClaim {
		s := all[i]
		if s.Announce == nil {
			continue
		}
		if j, ok := announced[s.VIP]; ok && !all[j].Announce.Equal(*s.Announce) {
			prev := all[j]
			*errs = append(*errs, &config.Error{File: s.File, Line: s.Line, Col: 1, Msg: fmt.Sprintf(
				"service %q: announce differs from service %q's (%s:%d) on the same vip %s: a VIP is one route", yamldoc.Cut(s.Name), yamldoc.Cut(prev.Name), prev.File, prev.Line, s.VIP)})
			continue
		}
		announced[s.VIP] = i
	}
	found := map[int]*config.Error{}
	for _, claims := range claimsByClients(all, byClaim) {
		for _, proto := range []string{"tcp", "udp", "sctp"} {
			sweep(all, claims, proto, found)
		}
	}
	for _, i := range byClaim {
		if e := found[i]; e != nil {
			*errs = append(*errs, e)
		}
	}
}

// claim is one port range of service svc (an index into all).
type claim struct {
	r   l4.PortRange
	svc int
}

// clients are the clients of a VIP a service takes: everyone (prefix
// invalid), or one of its source ranges. Two services collide only when
// they take the same clients: both everyone, or a prefix they both list.
type clients struct {
	vip    netip.Addr
	prefix netip.Prefix
}

// claimsByClients groups the claims of the services at idx (indexes into
// all) by the clients they are for.
func claimsByClients(all []*config.Service, idx []int) map[clients][]claim {
	out := map[clients][]claim{}
	for _, i := range idx {
		eachClaim(all[i], func(k clients, r l4.PortRange) bool {
			out[k] = append(out[k], claim{r: r, svc: i})
			return true
		})
	}
	return out
}

// eachClaim hands f each port range s claims for each of its clients
// (everyone, or each of its source ranges) until f returns false, and
// reports whether f never did. It allocates nothing: a check calls it for
// every service.
func eachClaim(s *config.Service, f func(clients, l4.PortRange) bool) bool {
	ranges, all := s.Ports, [1]l4.PortRange{{From: 1, To: 65535}}
	if s.AllPorts {
		ranges = all[:]
	}
	claimFor := func(k clients) bool {
		for _, r := range ranges {
			if !f(k, r) {
				return false
			}
		}
		return true
	}
	if len(s.SourceRanges) == 0 {
		return claimFor(clients{vip: s.VIP})
	}
	for _, p := range s.SourceRanges {
		if !claimFor(clients{vip: s.VIP, prefix: p}) {
			return false
		}
	}
	return true
}

// sweep finds overlapping claims of services on proto (or any), in port
// order. Every claim that starts within the furthest-reaching earlier
// claim overlaps it, so comparing with that one finds every service that
// overlaps some other.
func sweep(all []*config.Service, claims []claim, proto string, found map[int]*config.Error) {
	var on []claim
	for _, c := range claims {
		if p := all[c.svc].Protocol; p == proto || p == "any" {
			on = append(on, c)
		}
	}
	slices.SortFunc(on, func(a, b claim) int { return cmp.Or(cmp.Compare(a.r.From, b.r.From), cmp.Compare(a.svc, b.svc)) })
	var reach *claim
	for i := range on {
		c := &on[i]
		if reach != nil && c.r.From <= reach.r.To && reach.svc != c.svc {
			later, earlier := max(c.svc, reach.svc), min(c.svc, reach.svc)
			if found[later] == nil {
				a, b := all[later], all[earlier]
				r := l4.PortRange{From: c.r.From, To: min(c.r.To, reach.r.To)}
				port := r.String()
				if a.AllPorts && b.AllPorts {
					port = "all"
				}
				found[later] = &config.Error{File: a.File, Line: a.Line, Col: 1,
					Msg: fmt.Sprintf("service %q: %s %s port %s is already served by service %q (%s:%d)", yamldoc.Cut(a.Name), a.Protocol, a.VIP, port, yamldoc.Cut(b.Name), b.File, b.Line)}
			}
		}
		if reach == nil || c.r.To > reach.r.To {
			reach = c
		}
	}
}
