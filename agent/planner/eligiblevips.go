package planner

import (
	"maps"
	"net/netip"

	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// EligibleVIPCount is EligibleVIPs of the agent's desired state, kept up to
// date from what each change of it touched: every pass hands the holder
// the eligible VIPs, and finding them by a walk over 10,000 services was a
// fifth of a one-file change's pass.
type EligibleVIPCount struct {
	// count is, per VIP, its services with a destination that takes new
	// connections.
	count map[netip.Addr]int
	// set is EligibleVIPs: the VIPs with a count. It is replaced, never
	// modified, when a VIP comes or goes (the holder keeps it).
	set map[netip.Addr]bool
}

// CountEligible counts the eligible services of d by VIP.
func CountEligible(d Desired) EligibleVIPCount {
	e := EligibleVIPCount{count: map[netip.Addr]int{}}
	for _, vs := range d.Services {
		if takesNew(vs) {
			e.count[vs.VIP]++
		}
	}
	e.set = e.fromCounts()
	return e
}

// update returns e for next, which is prev with at most the IPVS services
// of keys changed. It reuses e's maps: e is not to be used again.
func (e EligibleVIPCount) Update(prev, next Desired, keys []ipvs.ServiceKey) EligibleVIPCount {
	seen := make(map[ipvs.ServiceKey]bool, len(keys))
	changed := false
	add := func(d Desired, k ipvs.ServiceKey, n int) {
		if vs, ok := FindService(d, k); ok && takesNew(vs) {
			before := e.count[vs.VIP]
			e.count[vs.VIP] += n
			if e.count[vs.VIP] == 0 {
				delete(e.count, vs.VIP)
			}
			changed = changed || (before == 0) != (e.count[vs.VIP] == 0)
		}
	}
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		add(prev, k, -1)
		add(next, k, 1)
	}
	if changed {
		e.set = e.fromCounts()
	}
	return e
}

// Equal reports whether e and o count the same services per VIP.
func (e EligibleVIPCount) Equal(o EligibleVIPCount) bool {
	return maps.Equal(e.count, o.count) && maps.Equal(e.set, o.set)
}

// VIPs is EligibleVIPs: the VIPs with a count. The map is replaced, never
// modified, when a VIP comes or goes.
func (e EligibleVIPCount) VIPs() map[netip.Addr]bool { return e.set }

func (e EligibleVIPCount) fromCounts() map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(e.count))
	for v := range maps.Keys(e.count) {
		out[v] = true
	}
	return out
}

// takesNew reports whether one of vs's destinations takes new connections
// (weight > 0). The connection-sync pusher counts for no VIP.
func takesNew(vs *VirtualService) bool {
	if vs.Internal {
		return false
	}
	for _, dst := range vs.Destinations {
		if dst.Weight > 0 {
			return true
		}
	}
	return false
}
