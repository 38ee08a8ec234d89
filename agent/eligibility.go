package agent

import (
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/policy"
)

// BackendHealth is what health checking knows of one backend.
type BackendHealth struct {
	Healthy bool
	Weight  int // reported through the weight header; -1: none
}

// HealthKey names one backend of one service for health checking.
func HealthKey(service string, b config.Backend) string {
	if b.Port == 0 {
		return service + "/" + b.Addr.String()
	}
	return service + "/" + netip.AddrPortFrom(b.Addr, b.Port).String()
}

// Eligibility is the policy's decision for one service, kept for logs and
// the status view.
type Eligibility struct {
	Rule     string
	Eligible map[string]bool // by HealthKey; administratively out backends are absent
	Healthy  map[string]bool // by HealthKey
	// Pool is where a failover policy drew the eligible set from (none
	// without a failover policy). In the agent's record of what it applied
	// it stays the last active pool while nothing is eligible.
	Pool policy.Pool
}

// diverted lists the backends whose connections seed 000 diverts when they
// do not persist: unhealthy, not eligible, while some backend is healthy
// ("diverted to newly selected healthy backends, unless all backends are
// unhealthy").
func (e Eligibility) diverted() map[string]bool {
	out := map[string]bool{}
	if !e.anyHealthy() {
		return out
	}
	for key, eligible := range e.Eligible {
		if !eligible && !e.Healthy[key] {
			out[key] = true
		}
	}
	return out
}

func (e Eligibility) anyHealthy() bool {
	for _, h := range e.Healthy {
		if h {
			return true
		}
	}
	return false
}

// ApplyHealth sets every destination's weight from the eligibility policy
// of seed 000 (agent/policy): an eligible backend gets its weight (the
// reported one under weighted load balancing), an ineligible one weight 0,
// which stops new connections and keeps established ones, while mh-fallback
// hands its share to the others. Backends configured at weight 0 are
// administratively out and never eligible. A backend missing from health
// counts as healthy. d is not modified.
func ApplyHealth(d Desired, services []config.Service, health map[string]BackendHealth) (Desired, map[string]Eligibility) {
	byName := map[string]config.Service{}
	for _, s := range services {
		byName[s.Name] = s
	}
	decisions := map[string]Eligibility{}
	weights := map[string][]int{} // service → kernel weight per backend
	slots := map[string][]int{}
	for _, s := range services {
		w, sl, e := serviceWeights(s, health)
		weights[s.Name], slots[s.Name], decisions[s.Name] = w, sl, e
	}
	out := d
	out.Services = make([]VirtualService, len(d.Services))
	for i, vs := range d.Services {
		vs.Destinations = slices.Clone(vs.Destinations)
		vs.SlotWeights = slices.Clone(vs.SlotWeights)
		if w, ok := weights[vs.Name]; ok && len(w) == len(vs.Destinations) {
			for j := range vs.Destinations {
				vs.Destinations[j].Weight = w[j]
				vs.SlotWeights[j] = slots[vs.Name][j]
			}
		}
		out.Services[i] = vs
	}
	return out, decisions
}

// serviceWeights returns the kernel and slot weight of each backend of s,
// in the order of s.Backends.
func serviceWeights(s config.Service, health map[string]BackendHealth) ([]int, []int, Eligibility) {
	weighted := slices.ContainsFunc(s.Backends, func(b config.Backend) bool { return b.Health != nil && b.Health.WeightHeader })
	p := policy.Policy{Failover: s.Failover.Configured, Weighted: weighted, Ratio: s.Failover.Ratio,
		DropIfNoneHealthy: s.Failover.DropIfNoneHealthy}
	var in []policy.Backend
	var idx []int // position in s.Backends of each policy input
	reported := make([]int, len(s.Backends))
	for i, b := range s.Backends {
		h, ok := health[HealthKey(s.Name, b)]
		if !ok || b.Health == nil {
			h = BackendHealth{Healthy: true, Weight: -1}
		}
		reported[i] = h.Weight
		if b.Weight == 0 {
			continue // administratively out
		}
		w := b.Weight
		if weighted && h.Weight >= 0 {
			w = h.Weight
		}
		in = append(in, policy.Backend{Failover: b.Failover, Healthy: h.Healthy, Weight: w})
		idx = append(idx, i)
	}
	r := policy.Eligible(p, in)
	e := Eligibility{Rule: r.Rule, Eligible: map[string]bool{}, Healthy: map[string]bool{}}
	if p.Failover {
		e.Pool = r.Pool(in)
	}
	kernel := make([]int, len(s.Backends))
	slots := make([]int, len(s.Backends))
	for i, b := range s.Backends {
		slots[i] = max(b.Weight, 1)
		if weighted && reported[i] > 0 {
			slots[i] = reported[i]
		}
	}
	for k, i := range idx {
		b := s.Backends[i]
		e.Eligible[HealthKey(s.Name, b)] = r.Eligible[k]
		e.Healthy[HealthKey(s.Name, b)] = in[k].Healthy
		if !r.Eligible[k] {
			continue
		}
		// An eligible backend always takes connections: one that only made
		// it through a zero-weight fallback tier gets weight 1.
		kernel[i] = max(in[k].Weight, 1)
		if !weighted {
			kernel[i] = b.Weight
		}
	}
	return kernel, slots, e
}
