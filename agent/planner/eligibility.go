package planner

import (
	"net/netip"
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

// HealthKey names backend b of service for health checking
// (config.BackendKey).
func HealthKey(service string, b config.Backend) string {
	return config.BackendKey(service, b.Addr, b.Port)
}

// isHealthKey reports whether key is HealthKey(service, b), without
// making that key.
func isHealthKey(key, service string, b config.Backend) bool {
	var buf [80]byte
	return string(config.AppendBackendKey(buf[:0], service, b.Addr, b.Port)) == key
}

// Eligibility is the policy's decision for one service, kept for logs and
// the status view. It names the backends by the configured service it was
// decided for, which it shares: a backend's decision is a byte by its
// position there. At 10,000 services × 10 backends a sorted slice of keys
// and flags was 2.4 MB (two maps a service, before it, ~10 MB), this 0.2.
type Eligibility struct {
	Rule string
	// of is the service decided (nil: none); never modified.
	of *config.Service
	// decided holds the decision of each backend of of, by position; an
	// administratively out one has none.
	decided []decision
	// Pool is where a failover policy drew the eligible set from (none
	// without a failover policy). In the agent's record of what it applied
	// it stays the last active pool while nothing is eligible.
	Pool policy.Pool
}

// decision is the policy's decision for one backend.
type decision uint8

const (
	decidedBackend decision = 1 << iota // not administratively out
	eligibleBackend
	healthyBackend
)

// Decided is the policy's decision for one backend.
type Decided struct {
	Key               string // HealthKey
	Eligible, Healthy bool
}

// Decided lists the decided backends in the configuration's order (by
// address and port); administratively out ones are absent.
func (e Eligibility) Decided() []Decided {
	var out []Decided
	for i, d := range e.decided {
		if d&decidedBackend != 0 {
			out = append(out, Decided{Key: e.key(i), Eligible: d&eligibleBackend != 0, Healthy: d&healthyBackend != 0})
		}
	}
	return out
}

// key is the HealthKey of the backend at i.
func (e Eligibility) key(i int) string {
	return HealthKey(e.of.Name, e.of.Backends[i])
}

// backend returns the decision for the backend with HealthKey key: found
// by scanning a few, by its address and port among many (the status view
// asks for every backend of a service).
func (e Eligibility) backend(key string) (decision, bool) {
	if len(e.decided) > scannedList {
		if i, ok := e.position(key); ok {
			if d := e.decided[i]; d&decidedBackend != 0 {
				return d, true
			}
			return 0, false
		}
	}
	for i, d := range e.decided {
		if d&decidedBackend != 0 && isHealthKey(key, e.of.Name, e.of.Backends[i]) {
			return d, true
		}
	}
	return 0, false
}

// position finds the backend with HealthKey key (ok false: not found
// that way).
func (e Eligibility) position(key string) (int, bool) {
	return BackendAt(e.of, key)
}

// BackendAt finds the backend of s with HealthKey key by a binary search
// of its backends, which the configuration sorts by address and port.
func BackendAt(s *config.Service, key string) (int, bool) {
	rest, named := strings.CutPrefix(key, s.Name)
	rest, ok := strings.CutPrefix(rest, "/")
	if !named || !ok {
		return 0, false
	}
	var want netip.AddrPort
	if addr, err := netip.ParseAddr(rest); err == nil {
		want = netip.AddrPortFrom(addr, 0)
	} else if want, err = netip.ParseAddrPort(rest); err != nil {
		return 0, false
	}
	i, found := slices.BinarySearchFunc(s.Backends, want, func(b config.Backend, w netip.AddrPort) int {
		return netip.AddrPortFrom(b.Addr, b.Port).Compare(w)
	})
	if !found || !isHealthKey(key, s.Name, s.Backends[i]) {
		return 0, false
	}
	return i, true
}

// Eligible says whether the backend with HealthKey key takes new connections.
func (e Eligibility) Eligible(key string) bool {
	d, _ := e.backend(key)
	return d&eligibleBackend != 0
}

// sameEligible says whether e and o decided the same backends eligible.
func (e Eligibility) SameEligible(o Eligibility) bool {
	if e.of == o.of {
		return slices.EqualFunc(e.decided, o.decided, func(a, b decision) bool {
			return a&(decidedBackend|eligibleBackend) == b&(decidedBackend|eligibleBackend)
		})
	}
	return slices.EqualFunc(e.Decided(), o.Decided(), func(a, b Decided) bool { return a.Key == b.Key && a.Eligible == b.Eligible })
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
	for i, d := range e.decided {
		if d&decidedBackend != 0 && d&(eligibleBackend|healthyBackend) == 0 {
			out[e.key(i)] = true
		}
	}
	return out
}

func (e Eligibility) anyHealthy() bool {
	return slices.ContainsFunc(e.decided, func(d decision) bool { return d&(decidedBackend|healthyBackend) == decidedBackend|healthyBackend })
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
	var at []int         // the position in s.Backends of each policy input
	var configured []int // its configured weight
	for i, b := range s.Backends {
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
		at = append(at, i)
		configured = append(configured, weight)
	}
	r := policy.Eligible(p, in)
	e := Eligibility{Rule: r.Rule, of: s, decided: make([]decision, len(s.Backends))}
	if s.SorryServer.IsValid() && r.Count() == 0 {
		e.Rule += "; the sorry server takes new connections"
	}
	if p.Failover {
		e.Pool = r.Pool(in)
	}
	for k, i := range at {
		e.decided[i] = decidedBackend
		if in[k].Healthy {
			e.decided[i] |= healthyBackend
		}
		if !r.Eligible[k] {
			continue
		}
		e.decided[i] |= eligibleBackend
		key := HealthKey(s.Name, s.Backends[i])
		w := out[key]
		// An eligible backend always takes connections: one that only made
		// it through a zero-weight fallback tier gets weight 1.
		w.kernel = max(in[k].Weight, 1)
		if !weighted {
			w.kernel = configured[k]
		}
		out[key] = w
	}
	return e
}
