package agent

import (
	"maps"
	"slices"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
)

// refreshHealth takes in the health checker's states: the services of the
// backends whose health changed are decided again, and their IPVS
// services go into the next pass.
func (a *Agent) refreshHealth() {
	if a.opts.Health == nil {
		return
	}
	next := backendHealth(a.opts.Health.Snapshot())
	changed := map[string]bool{}
	for key, h := range next {
		if old, ok := a.health[key]; !ok || old != h {
			changed[serviceOfKey(key)] = true
		}
	}
	for key := range a.health {
		if _, ok := next[key]; !ok {
			changed[serviceOfKey(key)] = true
		}
	}
	for _, ev := range healthEvents(a.health, next) {
		a.opts.Events.Notify(ev)
	}
	a.health = next
	if len(changed) == 0 {
		return
	}
	a.applyHealth(changed)
	a.pending.add(servicesOf(a.desired, changed)...)
}

// serviceOfKey is the service name of a HealthKey ("web/10.0.0.11:80"):
// service names hold no slash.
func serviceOfKey(key string) string {
	name, _, _ := strings.Cut(key, "/")
	return name
}

// applyHealth decides the eligible backends of the named services (nil:
// all) again with the health last taken in, and sets their destinations'
// weights in a.desired; the other services keep theirs. a.desired follows
// a.cfg.Desired (after a reload, names holds every service that changed).
func (a *Agent) applyHealth(names map[string]bool) {
	cfg := a.cfg
	var decisions map[string]Eligibility
	if names != nil {
		decisions = maps.Clone(a.eligibility) // copies the table, not entry by entry
	}
	if decisions == nil {
		decisions = make(map[string]Eligibility, len(cfg.Services))
	}
	byBackend := map[string]weights{}
	decided := map[string]bool{}
	named := config.NamesOf(names)
	for _, s := range cfg.Services {
		if names == nil || named.Has(s.Name) {
			decisions[s.Name] = serviceWeights(s, a.health, a.overrides, byBackend)
			decided[s.Name] = true
		}
	}
	for name := range names {
		if !decided[name] {
			delete(decisions, name) // removed
		}
	}
	prev := a.desired.Services
	out := cfg.Desired
	out.Services = make([]VirtualService, len(cfg.Desired.Services))
	j := 0
	for i, vs := range cfg.Desired.Services {
		if names == nil || named.Has(vs.Name) && !vs.Internal {
			out.Services[i] = withWeights(vs, byBackend)
			continue
		}
		for j < len(prev) && prev[j].ServiceKey.Compare(vs.ServiceKey) < 0 {
			j++
		}
		if j < len(prev) && prev[j].ServiceKey == vs.ServiceKey {
			out.Services[i] = prev[j]
		} else {
			out.Services[i] = vs
		}
	}
	a.logEligibility(decisions, decided)
	a.desired, a.eligibility = out, decisions
	if a.unapplied == nil {
		a.unapplied = map[string]bool{}
	}
	if names == nil {
		names = decided
	}
	for name := range names {
		a.unapplied[name] = true
	}
}

// withWeights returns vs with the weights of byBackend (by backend key),
// and its sorry server appended while none of its destinations takes new
// connections. A service whose weights are all as configured shares its
// destinations with the configuration's desired state.
func withWeights(vs VirtualService, byBackend map[string]weights) VirtualService {
	same, eligible := true, false
	for _, dst := range vs.Destinations {
		w, ok := byBackend[dst.Backend]
		if !ok {
			w = weights{kernel: dst.Weight, slot: dst.SlotWeight}
		}
		same = same && w.kernel == dst.Weight && w.slot == dst.SlotWeight
		eligible = eligible || w.kernel > 0
	}
	sorry := vs.Sorry != nil && !eligible
	if same && !sorry {
		return vs
	}
	vs.Destinations = slices.Clone(vs.Destinations)
	for j, dst := range vs.Destinations {
		if w, ok := byBackend[dst.Backend]; ok {
			vs.Destinations[j].Weight, vs.Destinations[j].SlotWeight = w.kernel, w.slot
		}
	}
	if sorry {
		// Last, so that a service made while it is needed has the kernel
		// list of one that got it later (the kernel adds at the head).
		vs.Destinations = append(vs.Destinations, *vs.Sorry)
	}
	return vs
}

// unappliedServices returns the names decided anew since the last plan
// and their configuration (those still configured).
func (a *Agent) unappliedServices() (map[string]bool, []config.Service) {
	if len(a.unapplied) == 0 {
		return nil, nil
	}
	var out []config.Service
	unapplied := config.NamesOf(a.unapplied)
	for _, s := range a.cfg.Services {
		if unapplied.Has(s.Name) {
			out = append(out, s)
		}
	}
	return a.unapplied, out
}

// markApplied records the decisions of names as applied (those of removed
// services go).
func (a *Agent) markApplied(names map[string]bool, applied map[string]Eligibility) {
	if a.applied == nil {
		a.applied = map[string]Eligibility{}
	}
	for name := range names {
		if e, ok := applied[name]; ok {
			a.applied[name] = e
		} else {
			delete(a.applied, name)
		}
	}
	a.unapplied = nil
}
