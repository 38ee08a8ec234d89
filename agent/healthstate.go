package agent

import (
	"maps"
	"slices"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs"
)

// refreshHealth takes in the health checker's states: the services of the
// backends whose health changed are decided again, and their IPVS
// services go into the next pass.
func (a *Agent) refreshHealth() {
	if a.opts.Health == nil {
		return
	}
	states, removed, all := a.opts.Health.Changes()
	if a.health == nil {
		a.health = map[string]BackendHealth{}
	}
	if all {
		for key := range a.health {
			if _, ok := states[key]; !ok {
				removed = append(removed, key)
			}
		}
	}
	// Only what changed is looked at: every Check tick takes the health
	// in, and a walk over 100,000 targets' states cost 0.2 s natively.
	changed := map[string]bool{}
	before, now := map[string]BackendHealth{}, map[string]BackendHealth{}
	for key, st := range states {
		h := BackendHealth{Healthy: st.Healthy, Weight: st.Weight}
		old, ok := a.health[key]
		if ok && old == h {
			continue
		}
		if ok {
			before[key] = old
		}
		now[key] = h
		changed[serviceOfKey(key)] = true
	}
	for _, key := range removed {
		if _, ok := a.health[key]; ok {
			delete(a.health, key)
			changed[serviceOfKey(key)] = true
		}
	}
	for _, ev := range healthEvents(before, now) {
		a.opts.Events.Notify(ev)
	}
	maps.Copy(a.health, now)
	if len(changed) == 0 {
		return
	}
	a.applyHealth(changed)
	a.pending.add(a.cfg.serviceKeys(changed)...)
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
// It is applyHealthSince for a configuration that did not change.
func (a *Agent) applyHealth(names map[string]bool) {
	a.applyHealthSince(a.cfg, nil, names)
}

// applyHealthSince is applyHealth after a reload from prev, the
// configuration a.desired was made from; fresh are the indexes in
// a.cfg.Services of the services the reload read again, when it knows
// them (nil: they are found by name). With both, the work is what
// changed: the named services' pieces, and a.desired spliced, instead of
// a walk over every service.
func (a *Agent) applyHealthSince(prev *Config, fresh []int, names map[string]bool) {
	cfg := a.cfg
	var decisions cowMap[string, Eligibility]
	if names != nil {
		decisions = a.eligibility.Clone() // shares what it does not decide anew
	}
	byBackend := map[string]weights{}
	decided := map[string]bool{}
	decide := func(s *config.Service) {
		decisions.Set(s.Name, serviceWeights(s, a.health, a.overrides, byBackend))
		decided[s.Name] = true
	}
	named := config.NamesOf(names)
	if names != nil && fresh != nil {
		for _, s := range cfg.servicesAt(fresh, names) { // not those only touched
			decide(s)
		}
	} else {
		for i := range cfg.Services {
			if names == nil || named.Has(cfg.Services[i].Name) {
				decide(cfg.Services[i])
			}
		}
	}
	for name := range names {
		if !decided[name] {
			decisions.Delete(name) // removed
		}
	}
	out := cfg.Desired
	if names != nil && prev != nil && prev.pieces != nil && cfg.pieces != nil {
		out.Services = spliceWeighted(a.desired.Services, names, prev.pieces, cfg.pieces, byBackend)
		a.eligibleVIPs = a.eligibleVIPs.update(a.desired, out, append(prev.pieces.keys(names), cfg.pieces.keys(names)...))
	} else {
		out.Services = weighted(cfg.Desired.Services, a.desired.Services, named, names == nil, byBackend)
		a.eligibleVIPs = countEligible(out)
	}
	a.logEligibility(&decisions, decided)
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

// weighted returns desired with the weights of byBackend on the named
// services (every one with all), the others as they were in prev (the
// previous desired state with weights), in one walk.
func weighted(desired, prev []*VirtualService, named config.Names, all bool, byBackend map[string]weights) []*VirtualService {
	out := make([]*VirtualService, len(desired))
	j := 0
	for i, vs := range desired {
		if all || named.Has(vs.Name) && !vs.Internal {
			out[i] = withWeights(vs, byBackend)
			continue
		}
		for j < len(prev) && prev[j].ServiceKey.Compare(vs.ServiceKey) < 0 {
			j++
		}
		if j < len(prev) && prev[j].ServiceKey == vs.ServiceKey {
			out[i] = prev[j]
		} else {
			out[i] = vs
		}
	}
	return out
}

// spliceWeighted returns prev (the desired state with weights, made from
// the pieces before) with the named services' IPVS services taken out and
// added again from pieces (now) with the weights of byBackend.
func spliceWeighted(prev []*VirtualService, names map[string]bool, before, pieces Pieces, byBackend map[string]weights) []*VirtualService {
	removed := before.keys(names)
	var added []*VirtualService
	for name := range names {
		if p := pieces.get(name); p != nil {
			for _, vs := range p.services {
				added = append(added, withWeights(vs, byBackend))
			}
		}
	}
	slices.SortFunc(removed, ipvs.ServiceKey.Compare)
	slices.SortFunc(added, byServiceKey)
	return mergeServices(prev, removed, added)
}

// withWeights returns vs with the weights of byBackend (by backend key),
// and its sorry server appended while none of its destinations takes new
// connections: vs itself when that changes nothing (a service whose
// weights are all as configured is the configuration's), else a copy.
func withWeights(in *VirtualService, byBackend map[string]weights) *VirtualService {
	same, eligible := true, false
	for _, dst := range in.Destinations {
		w, ok := byBackend[dst.Backend]
		if !ok {
			w = weights{kernel: dst.Weight, slot: dst.SlotWeight}
		}
		same = same && w.kernel == dst.Weight && w.slot == dst.SlotWeight
		eligible = eligible || w.kernel > 0
	}
	sorry := in.Sorry != nil && !eligible
	if same && !sorry {
		return in
	}
	vs := new(*in)
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
func (a *Agent) unappliedServices() (map[string]bool, []*config.Service) {
	if len(a.unapplied) == 0 {
		return nil, nil
	}
	return a.unapplied, a.cfg.named(a.unapplied)
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
