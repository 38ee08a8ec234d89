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
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
)

// RouteStatus is the director's status route on the local API socket.
const RouteStatus = "/v1/status"

var errNotReady = errors.New("the agent has not finished its first pass yet")

// Status is what `lvsd status` shows: every configured IPVS service with its
// destinations as the kernel has them now, and the reconciler's last pass.
type Status struct {
	Node          string          `json:"node"`
	Role          string          `json:"role"`
	Config        string          `json:"config"`
	LastReconcile time.Time       `json:"last_reconcile"`
	LastDuration  string          `json:"last_duration"`
	LastError     string          `json:"last_error,omitempty"`
	Services      []ServiceStatus `json:"services"`
	Cluster       *cluster.View   `json:"cluster,omitempty"`
	ConnSync      *connsync.Stats `json:"conn_sync,omitempty"`
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
}

func (a *Agent) publish(desired Desired, start time.Time, err error, ops ...Op) {
	s := &snapshot{cfg: a.cfg, desired: desired, drains: maps.Clone(a.drains),
		at: start, duration: a.opts.Now().Sub(start), eligibility: a.eligibility}
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

// Status reads the kernel now and combines it with the last pass. It is safe
// to call from any goroutine.
func (a *Agent) Status(ctx context.Context) (Status, error) {
	s := a.snap.Load()
	if s == nil {
		return Status{}, errNotReady
	}
	actual, err := a.opts.Kernel.ReadActual(ctx, s.desired)
	if err != nil {
		return Status{}, err
	}
	present, err := a.opts.Kernel.Addrs.List(ctx, s.desired.Interface)
	if err != nil {
		return Status{}, err
	}
	st := Status{Node: s.cfg.Agent.Node, Role: string(s.cfg.Agent.Role), Config: a.opts.ConfigPath,
		LastReconcile: s.at, LastDuration: s.duration.String(), LastError: s.err}
	now := a.opts.Now()
	states := a.healthStates()
	checked := checkedBackends(s.cfg.Services)
	for _, vs := range s.cfg.Desired.Services {
		if vs.Internal {
			continue
		}
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
		for _, k := range cur.Destinations { // still in the kernel, no longer configured
			if _, left := kernel[k.DestinationKey]; !left {
				continue
			}
			ds := DestinationStatus{Address: k.DestinationKey.String(), Forwarding: k.Method(),
				ConfiguredWeight: -1, Weight: k.Weight, ActiveConns: k.ActiveConns, InactiveConns: k.InactiveConns,
				ReportedWeight: health.NoWeight}
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
	return st, nil
}

// APIHandler serves the director's local API:
//
//	GET /v1/status  the Status, read from the kernel now
func (a *Agent) APIHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+RouteStatus, func(w http.ResponseWriter, r *http.Request) {
		st, err := a.Status(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		api.WriteJSON(w, st)
	})
	return mux
}
