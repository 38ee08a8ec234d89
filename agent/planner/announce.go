package planner

import (
	"net/netip"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/cluster/bgp/route"
)

// AnnouncePolicy says which route each VIP is announced with over BGP, and
// when: while held and served, with an eligible backend (or WithoutBackends),
// not stopping, and not drained (or, with a Deprefer drain, with worse
// attributes).
type AnnouncePolicy struct {
	Routes          map[netip.Addr]route.Route // by VIP
	WithoutBackends bool
	// Deprefer: a drained director keeps its routes with DrainMED and
	// DrainPrepend instead of withdrawing them.
	Deprefer     bool
	DrainMED     uint32
	DrainPrepend int
}

// announcePolicy builds the routes of the services' VIPs from the bgp
// block's defaults and the services' own announce.
func announcePolicy(b *config.BGP, services []*config.Service) *AnnouncePolicy {
	p := &AnnouncePolicy{Routes: map[netip.Addr]route.Route{}, WithoutBackends: b.WithoutBackends == "announce",
		Deprefer: b.Drain == "deprefer", DrainMED: b.DrainMED, DrainPrepend: b.DrainPrepend}
	for _, s := range services {
		a := b.Announce
		if s.Announce != nil {
			a = *s.Announce
		} else if _, ok := p.Routes[s.VIP]; ok {
			continue // another service of the VIP set it (the config checks they agree)
		}
		p.Routes[s.VIP] = route.Route{Prefix: netip.PrefixFrom(s.VIP, s.VIP.BitLen()), Communities: a.Communities,
			LargeCommunities: a.LargeCommunities, LocalPref: a.LocalPref, MED: a.MED, ASPathPrepend: a.ASPathPrepend}
	}
	return p
}

// route returns the route of vip as it is announced now, and whether it is
// announced at all.
func (p *AnnouncePolicy) Route(vip netip.Addr, eligible, drained, stopping bool) (route.Route, bool) {
	r, ok := p.Routes[vip]
	switch {
	case !ok, stopping, !eligible && !p.WithoutBackends, drained && !p.Deprefer:
		return route.Route{}, false
	case drained:
		med := p.DrainMED
		r.MED, r.ASPathPrepend = &med, p.DrainPrepend
	}
	return r, true
}

// EligibleVIPs are the VIPs with at least one destination that takes new
// connections (weight > 0) in d, which has health applied (WithHealth).
func EligibleVIPs(d Desired) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, vs := range d.Services {
		if !out[vs.VIP] && takesNew(vs) {
			out[vs.VIP] = true
		}
	}
	return out
}
