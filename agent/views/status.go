package views

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs/spec"
)

// Views answers for one agent: what it published, read with the kernel's
// numbers of the moment. Its methods are safe from any goroutine.
type Views struct {
	a   *agent.Agent
	src Sources
}

// New returns the views of a.
func New(a *agent.Agent) *Views { return &Views{a: a} }

// Routes of the director's local API socket.
const (
	RouteStatus  = "/v1/status"
	RouteDrain   = "/v1/drain"   // POST: drain the director (BGP: withdraw or deprefer its routes)
	RouteUndrain = "/v1/undrain" // POST: back in service
)

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
	Grounded string `json:"grounded,omitempty"`
	// InterfacesDown lists the interfaces services name that cannot carry
	// traffic now ("eth1, eth0.20"): their VIPs are not served.
	InterfacesDown string          `json:"interfaces_down,omitempty"`
	ConnSync       *connsync.Stats `json:"conn_sync,omitempty"`
	// PeerFlows counts the conntrack entries of other directors' FULLNAT
	// connections (ECMP with FULLNAT only).
	PeerFlows *agent.PeerFlowStats `json:"peer_flows,omitempty"`
	// ConfigLoadedAt is when the configuration in force was loaded;
	// ConfigError says why the last attempt since was rejected (the files
	// on disk are not what runs).
	ConfigLoadedAt time.Time `json:"config_loaded_at"`
	ConfigError    string    `json:"config_error,omitempty"`
	// HeldChange is a change of services loaded here that waits until
	// every live director advertises it (cluster.coordinated_changes).
	HeldChange *agent.HeldChange `json:"held_change,omitempty"`
	// VRRP are the virtual routers of cluster.mode vrrp, which has no
	// Cluster.
	VRRP []VRRPRouterStatus `json:"vrrp,omitempty"`
	// ConfigSync is cluster.config_sync on this director.
	ConfigSync *ConfigSyncStatus `json:"config_sync,omitempty"`
	// TOA is the program that gives FULLNAT real servers the client's
	// address (client_address: toa); nil without one.
	TOA *agent.TOAStatus `json:"toa,omitempty"`
}

// ServiceStatus is one IPVS service lvsd wants.
type ServiceStatus struct {
	Name      string `json:"name"`
	Key       string `json:"key"`
	VIP       string `json:"vip"`
	Scheduler string `json:"scheduler"`
	Flags     string `json:"flags,omitempty"`
	Rule      string `json:"eligibility_rule,omitempty"` // seed 000's rule that chose the eligible backends
	InKernel  bool   `json:"in_kernel"`
	VIPHeld   bool   `json:"vip_held"`
	// Interface is where the VIP goes when that is not the agent file's
	// interface (a service's own interface); "" otherwise.
	Interface string        `json:"interface,omitempty"`
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

func ratesOf(r spec.Rates) Rates {
	return Rates{Connections: r.ConnectionsPerSecond, PacketsIn: r.PacketsInPerSecond, PacketsOut: r.PacketsOutPerSecond,
		BytesIn: r.BytesInPerSecond, BytesOut: r.BytesOutPerSecond}
}

func (r *Rates) add(o Rates) {
	r.Connections, r.PacketsIn, r.PacketsOut = r.Connections+o.Connections, r.PacketsIn+o.PacketsIn, r.PacketsOut+o.PacketsOut
	r.BytesIn, r.BytesOut = r.BytesIn+o.BytesIn, r.BytesOut+o.BytesOut
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
func (v *Views) Status(ctx context.Context, q StatusQuery) (Status, error) {
	s := v.a.Published()
	if s == nil {
		return Status{}, agent.ErrNotReady
	}
	view, err := ParseView(string(q.View))
	if err != nil {
		return Status{}, err
	}
	selected, names, err := selectServices(s.Config, q.Services)
	if err != nil {
		return Status{}, err
	}
	view = view.resolve(len(selected))
	r, asOf, err := v.statusReader(ctx, s, selected)
	if err != nil {
		return Status{}, err
	}
	st := Status{Schema: api.SchemaVersion, Node: s.Config.Agent.Node, Role: string(s.Config.Agent.Role), Config: v.a.ConfigPath(), KernelAsOf: asOf,
		LastReconcile: s.At, LastDuration: s.Duration.Seconds(), LastError: s.Err,
		ConfigLoadedAt: s.Loaded.LastGood, ConfigError: s.Loaded.Err, View: view, HeldChange: s.Coordination.Held}
	st.Totals, st.Services = r.services(selected, view, v.a.Now())
	st.Totals.Services = names
	if err := v.addAgentState(ctx, &st); err != nil {
		return Status{}, err
	}
	return st, nil
}

// statusReader reads what Status needs besides the snapshot: the kernel's
// numbers of the selected services when they are few, the addresses on
// the interface, health. It returns when the kernel's numbers were read.
func (v *Views) statusReader(ctx context.Context, s *agent.Snapshot, selected []*planner.VirtualService) (*statusReader, time.Time, error) {
	actual, asOf := s.Actual, oldestRead(s.Actual, selected, s.At)
	if len(selected) <= FreshLimit {
		keys := make([]spec.ServiceKey, len(selected))
		for i, vs := range selected {
			keys[i] = vs.ServiceKey
		}
		var err error
		if actual, err = v.a.ReadServices(ctx, keys); err != nil {
			return nil, time.Time{}, err
		}
		asOf = v.a.Now()
	}
	present := map[netip.Addr]bool{}
	for _, dev := range s.Desired.Devices() {
		addrs, err := v.a.Addresses(ctx, dev)
		if err != nil && dev == s.Desired.Interface {
			return nil, time.Time{}, err
		}
		// Another interface a VIP names may be missing: it holds nothing.
		for _, p := range addrs {
			if p.Bits() == p.Addr().BitLen() {
				present[p.Addr()] = true
			}
		}
	}
	return &statusReader{s: s, actual: actual, present: present, health: v.healthReader(), vipInterfaces: vipInterfaces(s.Desired)}, asOf, nil
}

// addAgentState adds what the agent's other parts say: the cluster, the
// connection-sync relay, BGP, the VIP holder's drain.
func (v *Views) addAgentState(ctx context.Context, st *Status) error {
	parts := v.a.Parts()
	if parts.Cluster != nil {
		cv, err := parts.Cluster.View(ctx)
		if err != nil {
			return fmt.Errorf("cluster view: %w", err)
		}
		st.Cluster = &cv
	}
	if parts.ConnSync != nil {
		cs := parts.ConnSync.Stats()
		st.ConnSync = &cs
	}
	if parts.PeerFlows != nil {
		pf := parts.PeerFlows.Stats()
		st.PeerFlows = &pf
	}
	if parts.BGP != nil {
		b, err := parts.BGP.Status(ctx)
		if err != nil {
			return fmt.Errorf("bgp: %w", err)
		}
		st.BGP = &b
	}
	if parts.Holder != nil {
		hs := parts.Holder.State()
		st.Drained, st.DrainedAt, st.Grounded, st.InterfacesDown = hs.Drained, hs.DrainedAt, hs.Grounded, hs.InterfacesDown
	}
	toa, err := v.a.TOA(ctx)
	if err != nil {
		return err
	}
	st.TOA = toa
	v.addParts(st)
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

// reload answers a reload request with what the agent did.
func (v *Views) reload(ctx context.Context) (api.ReloadResult, error) {
	o, err := v.a.RequestReload(ctx)
	if err != nil {
		return api.ReloadResult{}, err
	}
	r := api.ReloadResult{Rejected: o.Rejected, Changed: o.Changed, Restart: o.Restart, Changes: o.Changes,
		Held: reloadHeld(o.Held)}
	r.Failed(o.Err)
	return r, nil
}

// reloadHeld is what a reload's answer says of a held change; nil: none.
func reloadHeld(h *agent.HeldChange) *api.ReloadHeld {
	if h == nil {
		return nil
	}
	return &api.ReloadHeld{Services: slices.Sorted(maps.Keys(h.Lagging)), WaitingFor: planner.LaggingDirectors(h.Lagging),
		NotWaitedFor: h.Unknown, Since: h.Since, Until: h.Until}
}

// APIHandler serves the director's local API:
//
//	GET /v1/status[?service=NAME|GLOB...][&view=VIEW]  the Status (Status, StatusQuery), compact JSON
//	GET /v1/explain?client=&virtual=&protocol=  an Explanation (explain.go)
//	GET /v1/connections[?service=NAME|GLOB...][&limit=N]  a ConnectionList (connections.go)
//	GET /v1/backends  the operator's overrides (backends.go)
//	POST /v1/backends/{drain,undrain,weight,clear}?service=&backend=[&weight=]
//	POST /v1/drain, /v1/undrain  the director (the VIP holder)
//	POST /v1/reload  read the configuration again and apply it (api.ReloadResult)
func (v *Views) APIHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+RouteExplain, v.serveExplain)
	mux.HandleFunc("GET "+RouteConnections, v.serveConnections)
	v.serveBackends(mux)
	mux.HandleFunc("GET "+RouteStatus, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		st, err := v.Status(r.Context(), StatusQuery{Services: q["service"], View: View(q.Get("view"))})
		if err == nil {
			services := st.Services
			st.Services = nil
			api.WriteCompactJSONList(w, st, "services", services)
			return
		}
		writeQueryAnswer(w, st, err)
	})
	mux.HandleFunc("POST "+api.RouteReload, api.ReloadHandler(v.reload))
	for route, on := range map[string]bool{RouteDrain: true, RouteUndrain: false} {
		mux.HandleFunc("POST "+route, func(w http.ResponseWriter, r *http.Request) {
			st, err := v.a.Parts().Holder.Drain(r.Context(), on, v.a.Now())
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
		// collected now, not while the next change runs (agent.CollectAhead).
		agent.CollectAhead()
	})
}

// vipInterfaces are the VIPs of d that go on an interface of their own,
// with it.
func vipInterfaces(d planner.Desired) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, v := range d.VIPs {
		if dev, ok := v.Interfaces[netip.PrefixFrom(v.VIP, v.VIP.BitLen())]; ok {
			out[v.VIP] = dev
		}
	}
	return out
}
