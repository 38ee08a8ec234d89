package planner

import (
	"slices"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/policy"
)

// BackendHealth is what health checking knows of one backend.
type BackendHealth struct {
	Healthy bool
	Weight  int // reported through the weight header; -1: none
}

// HealthKey names backend b of service for health checking: the key its
// file's reading made (config.BackendKey), or made now for a backend that
// was not read from a file.
func HealthKey(service string, b config.Backend) string {
	if b.Key != "" {
		return b.Key
	}
	return config.BackendKey(service, b.Addr, b.Port)
}

// Eligibility is the policy's decision for one service, kept for logs and
// the status view.
type Eligibility struct {
	Rule string
	// Backends are the decided backends sorted by Key; administratively out
	// ones are absent. A sorted slice, not maps: at 10,000 services × 10
	// backends two maps per service held ~10 MB, this ~2.5.
	Backends []Decided
	// Pool is where a failover policy drew the eligible set from (none
	// without a failover policy). In the agent's record of what it applied
	// it stays the last active pool while nothing is eligible.
	Pool policy.Pool
}

// Decided is the policy's decision for one backend.
type Decided struct {
	Key               string // HealthKey
	Eligible, Healthy bool
}

// backend returns the decision for the backend with HealthKey key.
func (e Eligibility) backend(key string) (Decided, bool) {
	i, ok := slices.BinarySearchFunc(e.Backends, key, func(d Decided, key string) int { return strings.Compare(d.Key, key) })
	if !ok {
		return Decided{}, false
	}
	return e.Backends[i], true
}

// Eligible says whether the backend with HealthKey key takes new connections.
func (e Eligibility) Eligible(key string) bool {
	d, _ := e.backend(key)
	return d.Eligible
}

// sameEligible says whether e and o decided the same backends eligible.
func (e Eligibility) SameEligible(o Eligibility) bool {
	return slices.EqualFunc(e.Backends, o.Backends, func(a, b Decided) bool { return a.Key == b.Key && a.Eligible == b.Eligible })
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
	for _, d := range e.Backends {
		if !d.Eligible && !d.Healthy {
			out[d.Key] = true
		}
	}
	return out
}

func (e Eligibility) anyHealthy() bool {
	return slices.ContainsFunc(e.Backends, func(d Decided) bool { return d.Healthy })
}

// weights are the kernel and slot weight the policy gives one backend.
type Weights struct{ kernel, slot int }

// WithHealth sets every destination's weight from the eligibility policy
// of seed 000 (agent/policy): an eligible backend gets its weight (the
// reported one under weighted load balancing), an ineligible one weight 0,
// which stops new connections and keeps established ones, while mh-fallback
// hands its share to the others. Backends configured at weight 0 are
// administratively out and never eligible. A backend missing from health
// counts as healthy. The operator's overrides replace a backend's weight,
// and a drained backend is administratively out like one at weight 0.
// Destinations find their backend by its key (Destination.Backend). d is
// not modified.
func WithHealth(d Desired, services []*config.Service, health map[string]BackendHealth, overrides Overrides) (Desired, map[string]Eligibility) {
	decisions := make(map[string]Eligibility, len(services))
	byBackend := map[string]Weights{}
	for _, s := range services {
		decisions[s.Name] = ServiceWeights(s, health, overrides, byBackend)
	}
	out := d
	out.Services = make([]*VirtualService, len(d.Services))
	for i, vs := range d.Services {
		out.Services[i] = withWeights(vs, byBackend)
	}
	return out, decisions
}

// ServiceWeights decides the eligible backends of s with the operator's
// overrides, records each one's kernel and slot weight in out by
// HealthKey, and returns the decision.
func ServiceWeights(s *config.Service, health map[string]BackendHealth, overrides Overrides, out map[string]Weights) Eligibility {
	weighted := slices.ContainsFunc(s.Backends, func(b config.Backend) bool { return b.Health != nil && b.Health.WeightHeader })
	// A sorry server stands in for the seed's last resort: with nothing
	// healthy no backend is eligible, and it takes the new connections.
	p := policy.Policy{Failover: s.Failover.Configured, Weighted: weighted, Ratio: s.Failover.Ratio,
		DropIfNoneHealthy: s.Failover.DropIfNoneHealthy || s.SorryServer.IsValid()}
	var in []policy.Backend
	var keys []string    // HealthKey of each policy input
	var configured []int // its configured weight
	for _, b := range s.Backends {
		key := HealthKey(s.Name, b)
		h, ok := health[key]
		if !ok || b.Health == nil {
			h = BackendHealth{Healthy: true, Weight: -1}
		}
		ov := overrides[key]
		weight := ov.weight(int(b.Weight))
		slot := max(weight, 1)
		if weight == 0 {
			slot = max(int(b.Weight), 1) // an override to 0 keeps the file's slots, as a drain does
		}
		if weighted && h.Weight > 0 {
			slot = h.Weight
		}
		out[key] = Weights{kernel: 0, slot: slot}
		if weight == 0 || ov.Drained {
			continue // administratively out
		}
		w := weight
		if weighted && h.Weight >= 0 {
			w = h.Weight
		}
		in = append(in, policy.Backend{Failover: b.Failover, Healthy: h.Healthy, Weight: w})
		keys = append(keys, key)
		configured = append(configured, weight)
	}
	r := policy.Eligible(p, in)
	e := Eligibility{Rule: r.Rule, Backends: make([]Decided, len(keys))}
	if s.SorryServer.IsValid() && r.Count() == 0 {
		e.Rule += "; the sorry server takes new connections"
	}
	if p.Failover {
		e.Pool = r.Pool(in)
	}
	for k, key := range keys {
		e.Backends[k] = Decided{Key: key, Eligible: r.Eligible[k], Healthy: in[k].Healthy}
		if !r.Eligible[k] {
			continue
		}
		w := out[key]
		// An eligible backend always takes connections: one that only made
		// it through a zero-weight fallback tier gets weight 1.
		w.kernel = max(in[k].Weight, 1)
		if !weighted {
			w.kernel = configured[k]
		}
		out[key] = w
	}
	slices.SortFunc(e.Backends, func(a, b Decided) int { return strings.Compare(a.Key, b.Key) })
	return e
}
