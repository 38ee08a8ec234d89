package agent

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/histogram"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs"
)

// What the views above the agent (agent/views: the status, the local
// API, the metrics) read of it, from any goroutine: the snapshot its
// owner goroutine publishes after each pass, and read-only doors to the
// host's state and the agent's other parts. They never reach the owner's
// state itself.

// ErrNotReady is the answer of a read or a change before the first pass.
var ErrNotReady = errors.New("the agent has not finished its first pass yet")

// Snapshot is the reconciler's state as its last pass left it, published
// by the owner goroutine for readers on other goroutines. Nothing modifies
// it once published: readers share it, and must not write to it either.
type Snapshot struct {
	Config   *LoadedConfig
	Desired  planner.Desired // with health applied
	Drains   planner.Drains
	At       time.Time // when the pass started
	Duration time.Duration
	Err      string // why the pass failed; "" when it succeeded
	// Eligibility is the policy's last decision per service; the owner
	// goroutine never writes it again, only clones of it.
	Eligibility planner.CopyOnWriteMap[string, planner.Eligibility]
	Resets      uint64            // destinations this pass reset
	Passes      ReconcileStats    // counts up to and including this pass
	Loaded      ConfigLoad        // the last attempt to load the configuration
	Actual      planner.Actual    // the kernel as this pass left it (read, then its ops)
	Overrides   planner.Overrides // the operator's, in force now (replaced, never modified)
	// Coordination is the change held for the other directors, if any,
	// and how changes went in force (coordinate.go).
	Coordination Coordination
}

func (a *Agent) publish(desired planner.Desired, actual planner.Actual, start time.Time, err error, ops ...planner.Op) {
	s := &Snapshot{Config: a.cfg, Desired: desired, Drains: maps.Clone(a.drains), Actual: actual,
		At: start, Duration: a.opts.Now().Sub(start), Eligibility: a.eligibility, Loaded: a.loaded,
		Overrides: a.overrides, Coordination: a.coordination}
	for _, op := range ops {
		if op.Kind == planner.AwaitExpiry {
			s.Resets += uint64(len(op.Expiring.Dests))
		}
	}
	if err != nil {
		s.Err = err.Error()
	}
	s.Passes = a.snap.Load().next(s)
	a.snap.Store(s)
}

// republish shows what changed outside a pass (a configuration rejected or
// unchanged, an override that planned nothing) in the last pass's
// snapshot: the status and the metrics must see it at once.
func (a *Agent) republish() {
	if prev := a.snap.Load(); prev != nil {
		s := *prev
		s.Loaded, s.Overrides, s.Coordination = a.loaded, a.overrides, a.coordination
		a.snap.Store(&s)
	}
}

// ReconcileStats counts the reconciler's passes since the agent started.
type ReconcileStats struct {
	Passes       uint64              // passes run
	Failed       uint64              // passes that ended with an error
	Durations    histogram.Durations // of every pass
	Last         time.Time           // start of the last pass; zero before the first
	LastDuration time.Duration
	LastError    string // "" when the last pass succeeded
	Services     int    // IPVS services the last pass wanted
	// Resets counts destinations deleted to drop their connections
	// (persistence_on_unhealthy, drain_on_failover false).
	Resets uint64
}

// next counts pass s on top of the previous snapshot (nil before the first
// pass). Only the owner goroutine publishes, so the counts never race.
func (prev *Snapshot) next(s *Snapshot) ReconcileStats {
	var r ReconcileStats
	if prev != nil {
		r = prev.Passes
	}
	r.Passes++
	if s.Err != "" {
		r.Failed++
	}
	r.Durations.Observe(s.Duration)
	r.Last, r.LastDuration, r.LastError = s.At, s.Duration, s.Err
	r.Services = len(s.Desired.Services)
	r.Resets += s.Resets
	return r
}

// ConfigLoad is the outcome of the last attempt to load the configuration
// (at start, at a signal, after an edit).
type ConfigLoad struct {
	At       time.Time // of the attempt
	Err      string    // why it was rejected; "" when it was taken
	LastGood time.Time // when the configuration in force was loaded
}

// loadedConfig records an attempt to load the configuration at now.
func (a *Agent) loadedConfig(now time.Time, err error) {
	a.loaded.At = now
	if err != nil {
		a.loaded.Err = err.Error()
	} else {
		a.loaded.Err, a.loaded.LastGood = "", now
	}
	// A rejected (or unchanged) configuration runs no pass, which is what
	// publishes: the status and the metrics must see the attempt anyway.
	if prev := a.snap.Load(); prev != nil {
		s := *prev
		s.Loaded = a.loaded
		a.snap.Store(&s)
	}
}

// Published returns the snapshot of the last pass; nil before the first
// has finished.
func (a *Agent) Published() *Snapshot { return a.snap.Load() }

// Reconciles returns the pass counts; ok is false before the first pass has
// finished. Safe to call from any goroutine.
func (a *Agent) Reconciles() (st ReconcileStats, ok bool) {
	s := a.snap.Load()
	if s == nil {
		return ReconcileStats{}, false
	}
	return s.Passes, true
}

// Stalled reports whether the reconcile loop looks stuck at now: it passes at
// least every Resync (plus a Check tick), so no finished pass for twice that
// means it hangs (e.g. a netlink call that never returns). Before the first
// pass it is never stalled: a slow start is not a hang. The systemd watchdog
// stops being fed when this is true.
func (a *Agent) Stalled(now time.Time) bool {
	s, ok := a.Reconciles()
	if !ok {
		return false
	}
	return now.Sub(s.Last.Add(s.LastDuration)) > 2*a.opts.Resync+a.opts.Check
}

// ReadServices reads the IPVS services of keys from the kernel now, as a
// pass reads them back (those not there are left out). It only reads.
func (a *Agent) ReadServices(ctx context.Context, keys []ipvs.ServiceKey) (planner.Actual, error) {
	return a.opts.Kernel.readServices(ctx, keys)
}

// Addresses lists the addresses on the interface dev now.
func (a *Agent) Addresses(ctx context.Context, dev string) ([]netip.Prefix, error) {
	return a.opts.Kernel.Addrs.List(ctx, dev)
}

// ConnectionTable is the kernel's IPVS connection table, to read; nil when
// the agent reads none.
func (a *Agent) ConnectionTable() ConnectionTable { return a.opts.Kernel.Conns }

// ChecksHealth reports whether the agent has a health checker.
func (a *Agent) ChecksHealth() bool { return a.opts.Health != nil }

// HealthStates calls f with the health checker's state now of each of
// keys (ok false: it checks no such target); without health checking it
// does not call f. f must be quick: the checker's lock is held
// (health.Monitor.States).
func (a *Agent) HealthStates(keys []string, f func(i int, st health.State, ok bool)) {
	if a.opts.Health != nil {
		a.opts.Health.States(keys, f)
	}
}

// Parts are the agent's other parts, which the status shows beside the
// reconciler's state; a nil one is not there.
type Parts struct {
	Cluster   ClusterViewer
	ConnSync  ConnSync
	PeerFlows *PeerFlows
	BGP       BGPViewer
	Holder    *Holder
}

// Parts returns the agent's other parts.
func (a *Agent) Parts() Parts {
	return Parts{Cluster: a.opts.Cluster, ConnSync: a.opts.ConnSync, PeerFlows: a.opts.PeerFlows, BGP: a.opts.BGP,
		Holder: a.holder}
}

// ConfigPath is the agent file the configuration was loaded from.
func (a *Agent) ConfigPath() string { return a.opts.ConfigPath }

// Now is the agent's clock (Options.Now).
func (a *Agent) Now() time.Time { return a.opts.Now() }

// HasChecks reports whether the backend with HealthKey key has health
// checks in c. It finds the backend in its service, without an index of
// the checked ones by key, which held a string for every checked backend.
func (c *LoadedConfig) HasChecks(key string) bool {
	s := c.service(serviceOfKey(key))
	if s == nil {
		return false
	}
	i, ok := planner.BackendAt(s, key)
	return ok && s.Backends[i].Health != nil
}
