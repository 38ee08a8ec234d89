package agent

import (
	"maps"
	"strings"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/config"
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
		a.health = map[string]planner.BackendHealth{}
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
	before, now := map[string]planner.BackendHealth{}, map[string]planner.BackendHealth{}
	for key, st := range states {
		h := planner.BackendHealth{Healthy: st.Healthy, Weight: st.Weight}
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
func (a *Agent) applyHealthSince(prev *LoadedConfig, fresh []int, names map[string]bool) {
	cfg := a.cfg
	var decisions planner.CopyOnWriteMap[string, planner.Eligibility]
	if names != nil {
		decisions = a.eligibility.Clone() // shares what it does not decide anew
	}
	byBackend := map[string]planner.Weights{}
	decided := map[string]bool{}
	decide := func(s *config.Service) {
		decisions.Set(s.Name, planner.ServiceWeights(s, a.health, a.overrides, byBackend))
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
		out.Services = planner.SpliceWeighted(a.desired.Services, names, prev.pieces, cfg.pieces, byBackend)
		a.eligibleVIPs = a.eligibleVIPs.Update(a.desired, out, append(prev.pieces.Keys(names), cfg.pieces.Keys(names)...))
	} else {
		out.Services = planner.Weighted(cfg.Desired.Services, a.desired.Services, named, names == nil, byBackend)
		a.eligibleVIPs = planner.CountEligible(out)
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

// unappliedServices returns the names decided anew since the last plan
// and their configuration (those still configured).
func (a *Agent) unappliedServices() (map[string]bool, []*config.Service) {
	if len(a.unapplied) == 0 {
		return nil, nil
	}
	return a.unapplied, a.cfg.named(a.unapplied)
}

// markApplied records the decisions of names as applied (those of removed
// services go). Every service decided and not in names was applied as it
// is, so the record is a copy of a.eligibility, which shares its storage:
// a map of its own held 1.2 MB at 10,000 services. It differs where an
// applied decision kept an earlier pool (a.carried).
func (a *Agent) markApplied(names map[string]bool, applied map[string]planner.Eligibility) {
	prev := a.applied
	a.applied = a.eligibility.Clone()
	if a.carried == nil {
		a.carried = map[string]bool{}
	}
	for name := range names {
		delete(a.carried, name)
		if e, ok := applied[name]; ok && e.Pool != a.eligibility.At(name).Pool {
			a.applied.Set(name, e)
			a.carried[name] = true
		}
	}
	for name := range a.carried {
		if names[name] {
			continue
		}
		if e, ok := prev.Get(name); ok && a.eligibility.Has(name) {
			a.applied.Set(name, e)
		} else {
			delete(a.carried, name)
		}
	}
	a.unapplied = nil
}
