package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/health"
)

// HealthChecker checks backends; agent/health.Monitor is the real one.
// Implementations must be safe for concurrent use.
type HealthChecker interface {
	// Set replaces the targets to check; unchanged ones keep their state.
	Set(targets []health.Target)
	// Update replaces the targets of the groups (services) named only.
	Update(groups map[string]bool, targets []health.Target)
	// Snapshot returns the state of every target by key.
	Snapshot() map[string]health.State
	// States calls f with the state of each of keys (ok false: no such
	// target), as of one instant, without a copy of every target's; f
	// must be quick and must not call the checker.
	States(keys []string, f func(i int, st health.State, ok bool))
	// Changes returns the states of the targets changed, added or
	// redefined since the last call and the keys of those removed; with
	// all, states is every target's and any other is gone (a checker that
	// cannot tell what changed).
	Changes() (states map[string]health.State, removed []string, all bool)
	// Changed delivers a value when some state may have changed.
	Changed() <-chan struct{}
}

// HealthTargets lists what to check for services: one target per backend
// that has checks, keyed by HealthKey. The backends that share a health
// block (those that inherit their service's) share one slice of checks,
// which the checker then holds and compares once for all of them. Pure.
func HealthTargets(services []*config.Service) []health.Target {
	var out []health.Target
	checks := map[*config.Health][]health.Check{}
	for _, s := range services {
		for _, b := range s.Backends {
			if b.Health == nil {
				continue
			}
			port := b.Port
			if port == 0 && len(s.Ports) > 0 {
				port = s.Ports[0].From
			}
			cs, ok := checks[b.Health]
			if !ok {
				cs = healthChecks(b.Health)
				checks[b.Health] = cs
			}
			t := healthTarget(planner.HealthKey(s.Name, b), b.Addr, port, b.Health, cs)
			t.Group = s.Name
			out = append(out, t)
		}
	}
	return out
}

// TrackKey is the health key of the director's upstream check.
const TrackKey = "track/upstream"

// TrackTarget is the director's upstream check (the agent file's track
// block) as a health target. Pure.
func TrackTarget(t *config.Track) health.Target {
	return healthTarget(TrackKey, t.Address, 0, t.Health, healthChecks(t.Health))
}

// healthTarget is a target probing addr (port: the checks' default) with
// checks, the checks of h.
func healthTarget(key string, addr netip.Addr, port uint16, h *config.Health, checks []health.Check) health.Target {
	return health.Target{Key: key, Addr: addr, Port: port, Checks: checks, AtLeast: h.AtLeast, Rise: h.Rise, Fall: h.Fall,
		StartDown: h.StartDown}
}

// healthChecks are the checks of h.
func healthChecks(h *config.Health) []health.Check {
	var out []health.Check
	for _, c := range h.Checks {
		out = append(out, health.Check{
			Type: c.Type, Port: c.Port, Interval: c.Interval, Timeout: c.Timeout,
			Method: c.Method, Path: c.Path, Host: c.Host, ExpectStatus: c.Expect, ExpectBody: c.Body,
			WeightHeader:  h.WeightHeader && (c.Type == "http" || c.Type == "https"),
			InsecureTLS:   !c.TLS.Verify, // off by default: config.TLS says why
			TLSServerName: c.TLS.ServerName, TLSRootCAs: c.TLS.RootCAs,
			Send: []byte(c.Send), ExpectData: []byte(c.Receive),
			Query: c.Query, Command: c.Command, ExecUser: execUser(c.User), LaxModes: c.LaxModes,
		})
	}
	return out
}

func execUser(u *config.User) *health.ExecUser {
	if u == nil {
		return nil
	}
	return &health.ExecUser{Name: u.Name, UID: u.UID, GID: u.GID, Groups: u.Groups, Home: u.Home}
}

// logEligibility logs every service of decided whose eligible set or rule
// changed from a.eligibility.
func (a *Agent) logEligibility(decisions *planner.CopyOnWriteMap[string, planner.Eligibility], decided map[string]bool) {
	var changed []string
	for name := range decided {
		e := decisions.At(name)
		prev, ok := a.eligibility.Get(name)
		if !ok || prev.Rule != e.Rule || !prev.SameEligible(e) {
			changed = append(changed, name)
		}
	}
	first := a.eligibility.Len() == 0
	if len(changed) == 0 {
		return
	}
	slices.Sort(changed)
	// One line per service, but not thousands at once: a start, or a
	// backend shared by many services failing, is summarized at info and
	// detailed at debug.
	level := slog.LevelInfo
	if first || len(changed) > maxOpsLogged {
		level = slog.LevelDebug
		a.log.Info("eligible backends decided", "event", "eligibility", "services", len(changed), "first", first,
			"details", "debug level, or lvsd status")
	}
	if !a.log.Enabled(context.Background(), level) {
		return
	}
	for _, name := range changed {
		e := decisions.At(name)
		var eligible []string
		for _, d := range e.Decided() {
			if d.Eligible {
				eligible = append(eligible, d.Key)
			}
		}
		a.log.Log(context.Background(), level, "eligible backends", "event", "eligibility", "service", name, "rule", e.Rule,
			"eligible", eligible, "count", len(eligible))
	}
}

// logResets logs, for every batch of destinations the plan resets, the
// service, the destinations and why: from the ops, so a reset the plan
// skipped (no connection entries, not in the kernel) is not reported.
func (a *Agent) logResets(d planner.Desired, ops []planner.Op) {
	for _, op := range ops {
		if op.Kind != planner.AwaitExpiry {
			continue
		}
		vs, _ := planner.FindService(d, op.Service.ServiceKey) // not a map of every service per pass
		a.log.Warn("dropping connections", "event", "reset", "service", vs.Name,
			"ipvs_service", op.Service.ServiceKey.String(), "destinations", fmt.Sprint(op.Expiring.Dests), "reason", op.Reason)
	}
}
