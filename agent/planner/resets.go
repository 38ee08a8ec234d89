package planner

import (
	"fmt"
	"slices"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/policy"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// Reset is the connections of one service that a change of eligibility
// drops (seed 000): those of backends that became unhealthy where they do
// not persist, or all of them when the eligible set switched pool and
// drain_on_failover is false.
type Reset struct {
	All      bool            // every destination
	Backends map[string]bool // by HealthKey
	why      string
}

// ConnectionResets compares the decision last applied (prev) with the new
// one (next) and returns the resets due, by service name, and the record to
// keep as applied. It is pure.
//
// Only transitions count: a backend is reset when it becomes unhealthy and
// ineligible, not on every pass it stays so, and nothing is reset without a
// previous decision (a fresh start does not know what changed, and the
// connections it finds were kept by the previous run's decisions).
func ConnectionResets(prev, next func(name string) (Eligibility, bool), services []*config.Service) (map[string]Reset, map[string]Eligibility) {
	applied := make(map[string]Eligibility, len(services))
	resets := map[string]Reset{}
	for _, s := range services {
		e, ok := next(s.Name)
		if !ok {
			continue
		}
		p, known := prev(s.Name)
		if e.Pool == policy.PoolNone && known {
			e.Pool = p.Pool
		}
		applied[s.Name] = e
		if !known {
			continue
		}
		if r, ok := serviceReset(s, p, e); ok {
			resets[s.Name] = r
		}
	}
	return resets, applied
}

func serviceReset(s *config.Service, prev, next Eligibility) (Reset, bool) {
	if s.Failover.Configured && !s.Failover.DrainOnFailover &&
		prev.Pool != policy.PoolNone && next.Pool != policy.PoolNone && prev.Pool != next.Pool {
		what := "failover"
		if next.Pool == policy.PoolPrimary {
			what = "failback"
		}
		return Reset{All: true, why: what + " with drain_on_failover false"}, true
	}
	if s.KeepsConnectionsOnUnhealthy() {
		return Reset{}, false
	}
	r := Reset{Backends: map[string]bool{}}
	before, now := prev.diverted(), next.diverted()
	for _, b := range s.Backends {
		k := HealthKey(s.Name, b)
		if _, was := prev.backend(k); was && !before[k] && now[k] {
			r.Backends[k] = true
		}
	}
	r.why = fmt.Sprintf("unhealthy, persistence_on_unhealthy %s (%s)", s.PersistenceOnUnhealthy, s.Protocol)
	return r, len(r.Backends) > 0
}

// planResets drops the connections of resets: the destinations are
// deleted (the kernel then expires their connection entries, see
// ipvs.EnableConnectionExpiry), the plan waits until it has, and adds them
// back (in canonical order within a batch), each with its slot weight before its weight, as
// for a new service. A destination that is not in the kernel or has no
// connection entries has nothing to drop and is left alone.
//
// New connections must find an eligible destination all along, so the
// destinations go in batches: the ineligible ones first, then the eligible
// ones in two halves, each half while the other takes new connections.
//
// A destination added back goes to the head of the kernel's list. The
// Maglev table depends on that order only where two destinations compete
// for a slot in the same round: a simulation of ip_vs_mh_populate puts it
// at about 0.3 % of the slots (docs/health.md).
func planResets(d Desired, a Actual, resets map[string]Reset) []Op {
	if len(resets) == 0 {
		return nil // the usual pass: no need to look at 10,000 services
	}
	var ops []Op
	for _, vs := range d.Services {
		r, ok := resets[vs.Name]
		cur, present := a.Services.Get(vs.ServiceKey)
		if !ok || !present {
			continue
		}
		var idx []int
		for i, dst := range vs.Destinations {
			j := slices.IndexFunc(cur.Destinations, func(x ipvs.Destination) bool { return x.DestinationKey == dst.Key() })
			if j >= 0 && (cur.Destinations[j].ActiveConns > 0 || cur.Destinations[j].InactiveConns > 0) && (r.All || r.Backends[vs.Backend(dst)]) {
				idx = append(idx, i)
			}
		}
		for _, batch := range resetBatches(vs, idx) {
			ops = append(ops, resetBatch(vs, batch, r.why)...)
		}
	}
	return ops
}

// resetBatches splits the positions idx of vs's destinations: the
// ineligible ones (weight 0), then the eligible ones in two halves.
func resetBatches(vs *VirtualService, idx []int) [][]int {
	var out [][]int
	isEligible := func(i int) bool { return vs.Destinations[i].Weight != 0 }
	if ineligible := slices.DeleteFunc(slices.Clone(idx), isEligible); len(ineligible) > 0 {
		out = append(out, ineligible)
	}
	eligible := slices.DeleteFunc(slices.Clone(idx), func(i int) bool { return !isEligible(i) })
	if h := len(eligible) / 2; h > 0 {
		out = append(out, eligible[:h])
		eligible = eligible[h:]
	}
	if len(eligible) > 0 {
		out = append(out, eligible)
	}
	return out
}

// resetBatch deletes the destinations at positions batch, waits until
// their connection entries are gone, and adds them back.
func resetBatch(vs *VirtualService, batch []int, why string) []Op {
	var ops []Op
	expiring := ipvs.Expiring{VIP: vs.VIP, Port: vs.Port}
	for _, i := range batch {
		ops = append(ops, Op{Kind: DeleteDestination, Service: vs.Service, Destination: vs.Kernel(vs.Destinations[i]), Reason: "reset: " + why})
		expiring.Dests = append(expiring.Dests, vs.Destinations[i].Key())
	}
	ops = append(ops, Op{Kind: AwaitExpiry, Service: vs.Service, Reason: why, Detail: &Detail{Expiring: expiring}})
	for _, i := range batch {
		n := len(ops)
		ops = appendDestination(ops, vs, vs.Destinations[i])
		for j := n; j < len(ops); j++ {
			if ops[j].Reason == "" {
				ops[j].Reason = "back after the reset"
			}
		}
	}
	return ops
}
