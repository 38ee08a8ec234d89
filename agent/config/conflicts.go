package config

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// checkSet finds conflicts between services: the same name twice, or two
// services claiming the same VIP, protocol and port for the same clients.
// Each service is reported at most once, for its first conflict with a
// service read before it. The work is O(n log n) in the number of port
// ranges, so that a file of ten thousand services checks as fast as one.
func checkSet(all []Service, errs *List) {
	// Indexes into all, not copies: a Service is large, and a reload checks
	// 10,000 of them.
	names := make(map[string]int, len(all))
	for i := range all {
		s := &all[i]
		if j, ok := names[s.Name]; ok {
			prev := &all[j]
			*errs = append(*errs, &Error{File: s.File, Line: s.Line, Col: 1,
				Msg: fmt.Sprintf("service %q is already defined at %s:%d", cut(s.Name), prev.File, prev.Line)})
			continue
		}
		names[s.Name] = i
	}
	announced := map[netip.Addr]int{} // the first service of each VIP with announce
	for i := range all {
		s := &all[i]
		if s.Announce == nil {
			continue
		}
		if j, ok := announced[s.VIP]; ok && !all[j].Announce.Equal(*s.Announce) {
			prev := &all[j]
			*errs = append(*errs, &Error{File: s.File, Line: s.Line, Col: 1, Msg: fmt.Sprintf(
				"service %q: announce differs from service %q's (%s:%d) on the same vip %s: a VIP is one route", cut(s.Name), cut(prev.Name), prev.File, prev.Line, s.VIP)})
			continue
		}
		announced[s.VIP] = i
	}
	found := map[int]*Error{}
	for _, claims := range claimsByClients(all) {
		for _, proto := range []string{"tcp", "udp", "sctp"} {
			sweep(all, claims, proto, found)
		}
	}
	for i := range all {
		if e := found[i]; e != nil {
			*errs = append(*errs, e)
		}
	}
}

// claim is one port range of service svc (an index into all).
type claim struct {
	r   PortRange
	svc int
}

// clients are the clients of a VIP a service takes: everyone (prefix
// invalid), or one of its source ranges. Two services collide only when
// they take the same clients: both everyone, or a prefix they both list.
type clients struct {
	vip    netip.Addr
	prefix netip.Prefix
}

func claimsByClients(all []Service) map[clients][]claim {
	out := map[clients][]claim{}
	for i, s := range all {
		ranges := s.Ports
		if s.AllPorts {
			ranges = []PortRange{{1, 65535}}
		}
		keys := []clients{{vip: s.VIP}}
		if len(s.SourceRanges) > 0 {
			keys = keys[:0]
			for _, p := range s.SourceRanges {
				keys = append(keys, clients{vip: s.VIP, prefix: p})
			}
		}
		for _, k := range keys {
			for _, r := range ranges {
				out[k] = append(out[k], claim{r: r, svc: i})
			}
		}
	}
	return out
}

// sweep finds overlapping claims of services on proto (or any), in port
// order. Every claim that starts within the furthest-reaching earlier
// claim overlaps it, so comparing with that one finds every service that
// overlaps some other.
func sweep(all []Service, claims []claim, proto string, found map[int]*Error) {
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
				r := PortRange{c.r.From, min(c.r.To, reach.r.To)}
				port := r.String()
				if a.AllPorts && b.AllPorts {
					port = "all"
				}
				found[later] = &Error{File: a.File, Line: a.Line, Col: 1,
					Msg: fmt.Sprintf("service %q: %s %s port %s is already served by service %q (%s:%d)", cut(a.Name), a.Protocol, a.VIP, port, cut(b.Name), b.File, b.Line)}
			}
		}
		if reach == nil || c.r.To > reach.r.To {
			reach = c
		}
	}
}
