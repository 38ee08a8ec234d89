package views

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/planner"
)

// Routes of the runtime control of backends (`lvsd backend`).
const (
	RouteBackends = "/v1/backends" // GET: the overrides in force
	// RouteBackend changes one backend: POST /v1/backends/{action}
	// ?service=NAME&backend=ADDR[:PORT][&weight=N], action one of drain,
	// undrain, weight, clear.
	RouteBackend = "/v1/backends/"
)

// BackendState is one backend with the operator's override: the answer to
// a change, and a line of `lvsd backend list`.
type BackendState struct {
	planner.BackendOverride
	// ConfiguredWeight is the service file's weight, which the override
	// replaces while it lasts.
	ConfiguredWeight int `json:"configured_weight"`
	// Kernel is the backend's weight in each IPVS service of the service,
	// as the last pass left the kernel (after the change, in an answer).
	Kernel []KernelWeight `json:"kernel"`
	// PassError is why the pass that applied the change failed (it is
	// retried at the next Check); "" when it succeeded.
	PassError string `json:"pass_error,omitempty"`
}

// BackendList is the answer of GET /v1/backends: every backend with an
// override.
type BackendList struct {
	Schema   int            `json:"schema"` // api.SchemaVersion
	Backends []BackendState `json:"backends"`
}

// BackendAnswer is the answer to a change: the backend's state after it.
type BackendAnswer struct {
	Schema int `json:"schema"` // api.SchemaVersion
	BackendState
}

// KernelWeight is a destination's weight in one IPVS service; -1: not in
// the kernel.
type KernelWeight struct {
	IPVSService string `json:"ipvs_service"`
	Destination string `json:"destination"`
	Weight      int    `json:"weight"`
}

// ChangeBackend applies an operator's change to one backend through the
// agent's goroutine (agent.ChangeBackend) and returns the backend's state
// once the pass that applied it is done. Safe from any goroutine while the
// agent runs.
func (v *Views) ChangeBackend(ctx context.Context, c planner.BackendChange) (BackendState, error) {
	ov, after, err := v.a.ChangeBackend(ctx, c)
	if err != nil {
		return BackendState{}, err
	}
	st := backendState(after, ov)
	st.PassError = after.Err
	return st, nil
}

// backendState describes the backend of ov as snapshot s has it.
func backendState(s *agent.Snapshot, ov planner.BackendOverride) BackendState {
	st := BackendState{BackendOverride: ov, ConfiguredWeight: -1, Kernel: []KernelWeight{}}
	key := ov.Key()
	for _, svc := range s.Config.Services {
		if svc.Name != ov.Service {
			continue
		}
		for _, b := range svc.Backends {
			if planner.HealthKey(svc.Name, b) == key {
				st.ConfiguredWeight = int(b.Weight)
			}
		}
	}
	for _, k := range planner.ServicesOf(s.Desired, map[string]bool{ov.Service: true}) {
		vs, _ := planner.FindService(s.Desired, k)
		for _, dst := range vs.Destinations {
			if vs.Backend(dst) != key {
				continue
			}
			kw := KernelWeight{IPVSService: k.String(), Destination: dst.Key().String(), Weight: -1}
			for _, cur := range s.Actual.Services.At(k).Destinations {
				if cur.DestinationKey == dst.Key() {
					kw.Weight = cur.Weight
				}
			}
			st.Kernel = append(st.Kernel, kw)
		}
	}
	return st
}

// Backends returns the overrides in force, with the kernel's weights as of
// the last pass. Safe to call from any goroutine.
func (v *Views) Backends() ([]BackendState, error) {
	s := v.a.Published()
	if s == nil {
		return nil, agent.ErrNotReady
	}
	out := []BackendState{}
	for _, ov := range s.Overrides.List() {
		out = append(out, backendState(s, ov))
	}
	return out, nil
}

// serveBackends adds the runtime control of backends to mux.
func (v *Views) serveBackends(mux *http.ServeMux) {
	mux.HandleFunc("GET "+RouteBackends, func(w http.ResponseWriter, r *http.Request) {
		list, err := v.Backends()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		api.WriteJSON(w, BackendList{Schema: api.SchemaVersion, Backends: list})
	})
	mux.HandleFunc("POST "+RouteBackend+"{action}", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		c := planner.BackendChange{Action: r.PathValue("action"), Service: q.Get("service"), Backend: q.Get("backend")}
		if c.Action == planner.ActionWeight {
			n, err := strconv.Atoi(q.Get("weight"))
			if err != nil {
				http.Error(w, fmt.Sprintf("weight %q is not a whole number", q.Get("weight")), http.StatusBadRequest)
				return
			}
			c.Weight = n
		}
		st, err := v.ChangeBackend(r.Context(), c)
		var refused *planner.ChangeError
		switch {
		case errors.As(err, &refused) && refused.NotFound:
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.As(err, &refused):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case errors.Is(err, agent.ErrNotReady), errors.Is(err, agent.ErrStopping):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			api.WriteJSON(w, BackendAnswer{Schema: api.SchemaVersion, BackendState: st})
		}
	})
}
