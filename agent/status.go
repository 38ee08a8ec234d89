package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/api"
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

// Status is what `lvsd status` shows: the selected IPVS services (as the
// view says) with their destinations as the kernel has them now, the totals
// over all of them, and the reconciler's last pass.
type Status struct {
	Schema int    `json:"schema"` // api.SchemaVersion
	Node   string `json:"node"`
	// KernelAsOf is when the kernel's numbers (weights, connections,
	// counters) were read: now, or when the query selects more than
	// FreshLimit IPVS services, the oldest read-back among them (a pass
	// reads only what it looks at; the audit reads every service in turn).
	KernelAsOf    time.Time `json:"kernel_as_of"`
	Role          string    `json:"role"`
	Config        string    `json:"config"`
	LastReconcile time.Time `json:"last_reconcile"`
	LastDuration  float64   `json:"last_duration_seconds"`
	LastError     string    `json:"last_error,omitempty"`
	// View is the view answered (ViewAuto becomes full or summary); with
	// summary and problems, Services holds only services with a problem.
	View     View            `json:"view"`
	Totals   StatusTotals    `json:"totals"`
	Services []ServiceStatus `json:"services"`
	Cluster  *cluster.View   `json:"cluster,omitempty"`
	BGP      *bgp.Status     `json:"bgp,omitempty"`
	// Drained: `lvsd drain` on this director (its routes withdrawn or
	// depreferred, its connections going on).
	Drained   bool      `json:"drained,omitempty"`
	DrainedAt time.Time `json:"drained_at,omitzero"`
	// Grounded says why this director serves no VIP now (interface down,
	// upstream check failing); empty when nothing holds it back.
	Grounded string          `json:"grounded,omitempty"`
	ConnSync *connsync.Stats `json:"conn_sync,omitempty"`
	// PeerFlows counts the conntrack entries of other directors' FULLNAT
	// connections (ECMP with FULLNAT only).
	PeerFlows *PeerFlowStats `json:"peer_flows,omitempty"`
	// ConfigLoadedAt is when the configuration in force was loaded;
	// ConfigError says why the last attempt since was rejected (the files
	// on disk are not what runs).
	ConfigLoadedAt time.Time `json:"config_loaded_at"`
	ConfigError    string    `json:"config_error,omitempty"`
}

// ServiceStatus is one IPVS service lvsd wants.
type ServiceStatus struct {
	Name      string        `json:"name"`
	Key       string        `json:"key"`
	VIP       string        `json:"vip"`
	Scheduler string        `json:"scheduler"`
	Flags     string        `json:"flags,omitempty"`
	Rule      string        `json:"eligibility_rule,omitempty"` // seed 000's rule that chose the eligible backends
	InKernel  bool          `json:"in_kernel"`
	VIPHeld   bool          `json:"vip_held"`
	Backends  BackendCounts `json:"backends"`
	// Problem says what needs a look, worst first ("no backend takes new
	// connections"); "" when nothing does.
	Problem      string              `json:"problem,omitempty"`
	Destinations []DestinationStatus `json:"destinations"` // none with ViewServices
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
	// DrainingFor is how long a removed destination has been draining.
	DrainingFor float64 `json:"draining_seconds,omitempty"`
	// Health of a backend with checks: healthy, unhealthy, or pending (no
	// round finished yet); "" without checks. HealthError says why it fails.
	Health      string `json:"health,omitempty"`
	HealthError string `json:"health_error,omitempty"`
	// Eligible says whether the policy lets it take new connections;
	// ReportedWeight is its X-Load-Balancing-Endpoint-Weight (-1: none).
	Eligible       bool `json:"eligible"`
	ReportedWeight int  `json:"reported_weight"`
	// Override is the operator's (`lvsd backend drain|weight`), with when
	// it was set; ConfiguredWeight stays the file's.
	Override *planner.BackendOverride `json:"override,omitempty"`
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
	Rates       Rates  `json:"rates"`
}

// Rates are IPVS's rate estimates (ipvsadm --rate), per second: the
// kernel averages each destination's traffic over a few seconds (its
// estimator runs every 2 s with a time constant of about 8 s).
type Rates struct {
	Connections uint64 `json:"connections_per_second"`
	PacketsIn   uint64 `json:"packets_in_per_second"`
	PacketsOut  uint64 `json:"packets_out_per_second"`
	BytesIn     uint64 `json:"bytes_in_per_second"`
	BytesOut    uint64 `json:"bytes_out_per_second"`
}

func ratesOf(r ipvs.Rates) Rates {
	return Rates{Connections: r.ConnectionsPerSecond, PacketsIn: r.PacketsInPerSecond, PacketsOut: r.PacketsOutPerSecond,
		BytesIn: r.BytesInPerSecond, BytesOut: r.BytesOutPerSecond}
}

func (r *Rates) add(o Rates) {
	r.Connections, r.PacketsIn, r.PacketsOut = r.Connections+o.Connections, r.PacketsIn+o.PacketsIn, r.PacketsOut+o.PacketsOut
	r.BytesIn, r.BytesOut = r.BytesIn+o.BytesIn, r.BytesOut+o.BytesOut
}

// snapshot is what the owner goroutine publishes after each pass for readers
// on other goroutines (the API); it is never modified once published.
type snapshot struct {
	cfg      *LoadedConfig
	desired  planner.Desired // with health applied
	drains   planner.Drains
	at       time.Time
	duration time.Duration
	err      string
	// eligibility is the policy's last decision per service; the owner
	// goroutine never writes it again, only clones of it.
	eligibility planner.CopyOnWriteMap[string, planner.Eligibility]
	resets      uint64            // destinations this pass reset
	passes      ReconcileStats    // counts up to and including this pass (metrics.go)
	loaded      ConfigLoad        // the last attempt to load the configuration
	actual      planner.Actual    // the kernel as this pass left it (read, then its ops)
	overrides   planner.Overrides // the operator's, in force now (replaced, never modified)
}

func (a *Agent) publish(desired planner.Desired, actual planner.Actual, start time.Time, err error, ops ...planner.Op) {
	s := &snapshot{cfg: a.cfg, desired: desired, drains: maps.Clone(a.drains), actual: actual,
		at: start, duration: a.opts.Now().Sub(start), eligibility: a.eligibility, loaded: a.loaded,
		overrides: a.overrides}
	for _, op := range ops {
		if op.Kind == planner.AwaitExpiry {
			s.resets += uint64(len(op.Expiring.Dests))
		}
	}
	if err != nil {
		s.err = err.Error()
	}
	s.passes = a.snap.Load().next(s)
	a.snap.Store(s)
}

// republish shows what changed outside a pass (a configuration rejected or
// unchanged, an override that planned nothing) in the last pass's
// snapshot: the status and the metrics must see it at once.
func (a *Agent) republish() {
	if prev := a.snap.Load(); prev != nil {
		s := *prev
		s.loaded, s.overrides = a.loaded, a.overrides
		a.snap.Store(&s)
	}
}

// oldestRead returns when the oldest numbers of the selected services in a
// were read back, or at if none was read by a pass.
func oldestRead(a planner.Actual, selected []*planner.VirtualService, at time.Time) time.Time {
	var oldest time.Time
	for _, vs := range selected {
		if t := a.Services.At(vs.ServiceKey).ReadAt; !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	if oldest.IsZero() {
		return at
	}
	return oldest
}

// FreshLimit is how many IPVS services Status reads from the kernel at the
// time of the query; a larger selection is answered from the passes'
// read-back. A service costs two netlink dumps, about 2 ms in the test VM
// (200 took 0.4 s): at 64 the status and every metrics scrape stay well
// under a second (at 10,000 services a fresh read would be 20 s).
const FreshLimit = 64

// StatusQuery selects what Status reports.
type StatusQuery struct {
	// Services are configured service names or path.Match globs ("web-*");
	// none: all. A pattern that matches nothing is an error.
	Services []string
	View     View // "": ViewFull
}

// Status combines the kernel (read now, or at the last pass for large
// selections) with the last pass. Its cost is a few counters per selected
// service plus what the view lists. It is safe to call from any goroutine.
func (a *Agent) Status(ctx context.Context, q StatusQuery) (Status, error) {
	s := a.snap.Load()
	if s == nil {
		return Status{}, errNotReady
	}
	view, err := ParseView(string(q.View))
	if err != nil {
		return Status{}, err
	}
	selected, names, err := selectServices(s.cfg, q.Services)
	if err != nil {
		return Status{}, err
	}
	view = view.resolve(len(selected))
	r, asOf, err := a.statusReader(ctx, s, selected)
	if err != nil {
		return Status{}, err
	}
	st := Status{Schema: api.SchemaVersion, Node: s.cfg.Agent.Node, Role: string(s.cfg.Agent.Role), Config: a.opts.ConfigPath, KernelAsOf: asOf,
		LastReconcile: s.at, LastDuration: s.duration.Seconds(), LastError: s.err,
		ConfigLoadedAt: s.loaded.LastGood, ConfigError: s.loaded.Err, View: view}
	st.Totals, st.Services = r.services(selected, view, a.opts.Now())
	st.Totals.Services = names
	if err := a.addAgentState(ctx, &st); err != nil {
		return Status{}, err
	}
	return st, nil
}

// statusReader reads what Status needs besides the snapshot: the kernel's
// numbers of the selected services when they are few, the addresses on
// the interface, health. It returns when the kernel's numbers were read.
func (a *Agent) statusReader(ctx context.Context, s *snapshot, selected []*planner.VirtualService) (*statusReader, time.Time, error) {
	actual, asOf := s.actual, oldestRead(s.actual, selected, s.at)
	if len(selected) <= FreshLimit {
		keys := make([]ipvs.ServiceKey, len(selected))
		for i, vs := range selected {
			keys[i] = vs.ServiceKey
		}
		var err error
		if actual, err = a.opts.Kernel.readServices(ctx, keys); err != nil {
			return nil, time.Time{}, err
		}
		asOf = a.opts.Now()
	}
	addrs, err := a.opts.Kernel.Addrs.List(ctx, s.desired.Interface)
	if err != nil {
		return nil, time.Time{}, err
	}
	present := make(map[netip.Addr]bool, len(addrs))
	for _, p := range addrs {
		if p.Bits() == p.Addr().BitLen() {
			present[p.Addr()] = true
		}
	}
	return &statusReader{s: s, actual: actual, present: present, states: a.healthStates(), checked: &s.cfg.checked}, asOf, nil
}

// addAgentState adds what the agent's other parts say: the cluster, the
// connection-sync relay, BGP, the VIP holder's drain.
func (a *Agent) addAgentState(ctx context.Context, st *Status) error {
	if a.opts.Cluster != nil {
		v, err := a.opts.Cluster.View(ctx)
		if err != nil {
			return fmt.Errorf("cluster view: %w", err)
		}
		st.Cluster = &v
	}
	if a.opts.ConnSync != nil {
		cs := a.opts.ConnSync.Stats()
		st.ConnSync = &cs
	}
	if a.opts.PeerFlows != nil {
		pf := a.opts.PeerFlows.Stats()
		st.PeerFlows = &pf
	}
	if a.opts.BGP != nil {
		b, err := a.opts.BGP.Status(ctx)
		if err != nil {
			return fmt.Errorf("bgp: %w", err)
		}
		st.BGP = &b
	}
	if a.holder != nil {
		hs := a.holder.State()
		st.Drained, st.DrainedAt, st.Grounded = hs.Drained, hs.DrainedAt, hs.Grounded
	}
	return nil
}

// writeQueryAnswer answers a read as compact JSON (it may be large), or
// with its error: 400 for a query that cannot be answered as asked, else
// 503 (the agent is not ready, the kernel could not be read).
func writeQueryAnswer(w http.ResponseWriter, answer any, err error) {
	switch {
	case errors.Is(err, errBadQuery):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		api.WriteCompactJSON(w, answer)
	}
}

// APIHandler serves the director's local API:
//
//	GET /v1/status[?service=NAME|GLOB...][&view=VIEW]  the Status (Status, StatusQuery), compact JSON
//	GET /v1/explain?client=&virtual=&protocol=  an Explanation (explain.go)
//	GET /v1/connections[?service=NAME|GLOB...][&limit=N]  a ConnectionList (connections.go)
//	GET /v1/backends  the operator's overrides (backends.go)
//	POST /v1/backends/{drain,undrain,weight,clear}?service=&backend=[&weight=]
//	POST /v1/drain, /v1/undrain  the director (the VIP holder)
func (a *Agent) APIHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+RouteExplain, a.serveExplain)
	mux.HandleFunc("GET "+RouteConnections, a.serveConnections)
	a.serveBackends(mux)
	mux.HandleFunc("GET "+RouteStatus, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		st, err := a.Status(r.Context(), StatusQuery{Services: q["service"], View: View(q.Get("view"))})
		if err == nil {
			services := st.Services
			st.Services = nil
			api.WriteCompactJSONList(w, st, "services", services)
			return
		}
		writeQueryAnswer(w, st, err)
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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		// `status --all` at 10,000 services leaves tens of MiB behind:
		// collected now, not while the next change runs (collectAhead).
		collectAhead()
	})
}
