package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
)

// Routes of the director's local API socket.
const (
	RouteStatus  = "/v1/status"
	RouteDrain   = "/v1/drain"   // POST: drain the director (BGP: withdraw or deprefer its routes)
	RouteUndrain = "/v1/undrain" // POST: back in service
)

var errNotReady = errors.New("the agent has not finished its first pass yet")

// Status is what `lvsd status` shows: every configured IPVS service with its
// destinations as the kernel has them now, and the reconciler's last pass.
type Status struct {
	Node string `json:"node"`
	// KernelAsOf is when the kernel's numbers (weights, connections,
	// counters) were read: now, or when the query selects more than
	// FreshLimit IPVS services, the oldest read-back among them (a pass
	// reads only what it looks at; the audit reads every service in turn).
	KernelAsOf    time.Time       `json:"kernel_as_of"`
	Role          string          `json:"role"`
	Config        string          `json:"config"`
	LastReconcile time.Time       `json:"last_reconcile"`
	LastDuration  string          `json:"last_duration"`
	LastError     string          `json:"last_error,omitempty"`
	Services      []ServiceStatus `json:"services"`
	Cluster       *cluster.View   `json:"cluster,omitempty"`
	BGP           *bgp.Status     `json:"bgp,omitempty"`
	// Drained: `lvsd drain` on this director (its routes withdrawn or
	// depreferred, its connections going on).
	Drained   bool            `json:"drained,omitempty"`
	DrainedAt time.Time       `json:"drained_at,omitzero"`
	ConnSync  *connsync.Stats `json:"conn_sync,omitempty"`
	// ConfigLoadedAt is when the configuration in force was loaded;
	// ConfigError says why the last attempt since was rejected (the files
	// on disk are not what runs).
	ConfigLoadedAt time.Time `json:"config_loaded_at"`
	ConfigError    string    `json:"config_error,omitempty"`
}

// ServiceStatus is one IPVS service lvsd wants.
type ServiceStatus struct {
	Name         string              `json:"name"`
	Key          string              `json:"key"`
	VIP          string              `json:"vip"`
	Scheduler    string              `json:"scheduler"`
	Flags        string              `json:"flags,omitempty"`
	Rule         string              `json:"eligibility_rule,omitempty"` // seed 000's rule that chose the eligible backends
	InKernel     bool                `json:"in_kernel"`
	VIPHeld      bool                `json:"vip_held"`
	Destinations []DestinationStatus `json:"destinations"`
}

// DestinationStatus is one real server of a service: configured and kernel
// weight, connections, and drain progress.
type DestinationStatus struct {
	Address          string `json:"address"`
	Forwarding       string `json:"forwarding"`
	ConfiguredWeight int    `json:"configured_weight"` // -1: no longer configured (draining)
	Weight           int    `json:"weight"`            // in the kernel; -1: not in the kernel
	ActiveConns      int    `json:"active_conns"`
	InactiveConns    int    `json:"inactive_conns"`
	DrainingFor      string `json:"draining_for,omitempty"`
	// Health of a backend with checks: healthy, unhealthy, or pending (no
	// round finished yet); "" without checks. HealthError says why it fails.
	Health      string `json:"health,omitempty"`
	HealthError string `json:"health_error,omitempty"`
	// Eligible says whether the policy lets it take new connections;
	// ReportedWeight is its X-Load-Balancing-Endpoint-Weight (-1: none).
	Eligible       bool `json:"eligible"`
	ReportedWeight int  `json:"reported_weight"`
	// Sorry says it is the service's sorry server: in the kernel while no
	// backend is eligible, draining (weight 0) once one is again.
	Sorry bool `json:"sorry_server,omitempty"`
	// Traffic counters from IPVS since the destination was added (0 when
	// it is not in the kernel); DR and tunnel replies bypass the director.
	Connections uint64 `json:"connections_total"`
	PacketsIn   uint64 `json:"packets_in"`
	PacketsOut  uint64 `json:"packets_out"`
	BytesIn     uint64 `json:"bytes_in"`
	BytesOut    uint64 `json:"bytes_out"`
}

// snapshot is what the owner goroutine publishes after each pass for readers
// on other goroutines (the API); it is never modified once published.
type snapshot struct {
	cfg      *Config
	desired  Desired // with health applied
	drains   Drains
	at       time.Time
	duration time.Duration
	err      string
	// eligibility is the policy's last decision per service; the map is
	// replaced, never modified, by the owner goroutine.
	eligibility map[string]Eligibility
	resets      uint64         // destinations this pass reset
	passes      ReconcileStats // counts up to and including this pass (metrics.go)
	loaded      ConfigLoad     // the last attempt to load the configuration
	actual      Actual         // the kernel as this pass left it (read, then its ops)
}

func (a *Agent) publish(desired Desired, actual Actual, start time.Time, err error, ops ...Op) {
	s := &snapshot{cfg: a.cfg, desired: desired, drains: maps.Clone(a.drains), actual: actual,
		at: start, duration: a.opts.Now().Sub(start), eligibility: a.eligibility, loaded: a.loaded}
	for _, op := range ops {
		if op.Kind == AwaitExpiry {
			s.resets += uint64(len(op.Expiring.Dests))
		}
	}
	if err != nil {
		s.err = err.Error()
	}
	s.passes = a.snap.Load().next(s)
	a.snap.Store(s)
}

// oldestRead returns when the oldest numbers of the selected services in a
// were read back, or at if none was read by a pass.
func oldestRead(a Actual, selected []VirtualService, at time.Time) time.Time {
	var oldest time.Time
	for _, vs := range selected {
		if t := a.Services[vs.ServiceKey].ReadAt; !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	if oldest.IsZero() {
		return at
	}
	return oldest
}

// FreshLimit is how many IPVS services Status reads from the kernel at the
// time of the query; a larger selection is answered from the last pass's
// read-back (at 10,000 services a fresh read is seconds, and the status and
// every metrics scrape must stay well under one).
const FreshLimit = 256

// StatusQuery selects what Status reports.
type StatusQuery struct {
	Services []string // configured service names; none: all
}

// Status combines the kernel (read now, or at the last pass for large
// selections) with the last pass. It is safe to call from any goroutine.
func (a *Agent) Status(ctx context.Context, q StatusQuery) (Status, error) {
	s := a.snap.Load()
	if s == nil {
		return Status{}, errNotReady
	}
	var selected []VirtualService
	for _, vs := range s.cfg.Desired.Services {
		if !vs.Internal && (len(q.Services) == 0 || slices.Contains(q.Services, vs.Name)) {
			selected = append(selected, vs)
		}
	}
	actual, asOf := s.actual, oldestRead(s.actual, selected, s.at)
	if len(selected) <= FreshLimit {
		keys := make([]ipvs.ServiceKey, len(selected))
		for i, vs := range selected {
			keys[i] = vs.ServiceKey
		}
		var err error
		if actual, err = a.opts.Kernel.readServices(ctx, keys); err != nil {
			return Status{}, err
		}
		asOf = a.opts.Now()
	}
	present, err := a.opts.Kernel.Addrs.List(ctx, s.desired.Interface)
	if err != nil {
		return Status{}, err
	}
	st := Status{Node: s.cfg.Agent.Node, Role: string(s.cfg.Agent.Role), Config: a.opts.ConfigPath, KernelAsOf: asOf,
		LastReconcile: s.at, LastDuration: s.duration.String(), LastError: s.err,
		ConfigLoadedAt: s.loaded.LastGood, ConfigError: s.loaded.Err}
	now := a.opts.Now()
	states := a.healthStates()
	checked := checkedBackends(s.cfg.Services)
	for _, vs := range selected {
		vip := vs.VIP
		cur, inKernel := actual.Services[vs.ServiceKey]
		ss := ServiceStatus{Name: vs.Name, Key: vs.ServiceKey.String(), Scheduler: vs.Scheduler,
			VIP: vip.String(), Flags: vs.Flags.String(), InKernel: inKernel,
			VIPHeld: slices.Contains(present, netip.PrefixFrom(vip, vip.BitLen())),
			Rule:    s.eligibility[vs.Name].Rule}
		kernel := map[ipvs.DestinationKey]ipvs.Destination{}
		for _, d := range cur.Destinations {
			kernel[d.DestinationKey] = d
		}
		for _, d := range vs.Destinations {
			ds := DestinationStatus{Address: d.DestinationKey.String(), Forwarding: d.Method(),
				ConfiguredWeight: d.Weight, Weight: -1}
			ds.setHealth(states, s.eligibility, checked, vs.Name, d.Backend)
			if k, ok := kernel[d.DestinationKey]; ok {
				ds.Weight, ds.ActiveConns, ds.InactiveConns = k.Weight, k.ActiveConns, k.InactiveConns
				ds.setStats(k.Stats)
				delete(kernel, d.DestinationKey)
			}
			ss.Destinations = append(ss.Destinations, ds)
		}
		for _, k := range cur.Destinations { // still in the kernel, no longer configured (or the sorry server)
			if _, left := kernel[k.DestinationKey]; !left {
				continue
			}
			ds := DestinationStatus{Address: k.DestinationKey.String(), Forwarding: k.Method(),
				ConfiguredWeight: -1, Weight: k.Weight, ActiveConns: k.ActiveConns, InactiveConns: k.InactiveConns,
				ReportedWeight: health.NoWeight, Sorry: vs.isSorry(k.DestinationKey)}
			if ds.Sorry && sorryWanted(s.desired, vs.ServiceKey) {
				ds.ConfiguredWeight, ds.Eligible = vs.Sorry.Weight, true // no backend is
			}
			ds.setStats(k.Stats)
			if since, ok := s.drains[DrainKey{vs.ServiceKey, k.DestinationKey}]; ok {
				ds.DrainingFor = now.Sub(since).Round(time.Second).String()
			}
			ss.Destinations = append(ss.Destinations, ds)
		}
		st.Services = append(st.Services, ss)
	}
	if a.opts.Cluster != nil {
		v, err := a.opts.Cluster.View(ctx)
		if err != nil {
			return Status{}, fmt.Errorf("cluster view: %w", err)
		}
		st.Cluster = &v
	}
	if a.opts.ConnSync != nil {
		cs := a.opts.ConnSync.Stats()
		st.ConnSync = &cs
	}
	if a.opts.BGP != nil {
		b, err := a.opts.BGP.Status(ctx)
		if err != nil {
			return Status{}, fmt.Errorf("bgp: %w", err)
		}
		st.BGP = &b
	}
	if a.holder != nil {
		hs, err := a.holder.State(ctx)
		if err != nil {
			return Status{}, err
		}
		st.Drained, st.DrainedAt = hs.Drained, hs.DrainedAt
	}
	return st, nil
}

// sorryWanted reports whether the service with key k has its sorry server
// among its destinations in d (with health applied): no backend is eligible.
func sorryWanted(d Desired, k ipvs.ServiceKey) bool {
	vs, ok := findService(d, k)
	return ok && vs.Sorry != nil && slices.ContainsFunc(vs.Destinations, func(dst Destination) bool { return vs.isSorry(dst.DestinationKey) })
}

// APIHandler serves the director's local API:
//
//	GET /v1/status[?service=NAME...]  the Status (Status, StatusQuery)
//	GET /v1/explain?client=&virtual=&protocol=  an Explanation (explain.go)
func (a *Agent) APIHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+RouteExplain, a.serveExplain)
	mux.HandleFunc("GET "+RouteStatus, func(w http.ResponseWriter, r *http.Request) {
		st, err := a.Status(r.Context(), StatusQuery{Services: r.URL.Query()["service"]})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		api.WriteJSON(w, st)
	})
	for route, on := range map[string]bool{RouteDrain: true, RouteUndrain: false} {
		mux.HandleFunc("POST "+route, func(w http.ResponseWriter, r *http.Request) {
			st, err := a.holder.Drain(r.Context(), on, a.opts.Now())
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			api.WriteJSON(w, st)
		})
	}
	return mux
}
