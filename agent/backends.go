package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/api"
)

// Routes of the runtime control of backends (`lvsd backend`).
const (
	RouteBackends = "/v1/backends" // GET: the overrides in force
	// RouteBackend changes one backend: POST /v1/backends/{action}
	// ?service=NAME&backend=ADDR[:PORT][&weight=N], action one of drain,
	// undrain, weight, clear.
	RouteBackend = "/v1/backends/"
)

var errStopping = errors.New("the agent is stopping")

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

// backendRequest is a change handed to the agent's goroutine.
type backendRequest struct {
	change planner.BackendChange
	reply  chan backendReply
}

type backendReply struct {
	state BackendState
	err   error
}

// ChangeBackend applies an operator's change to one backend: on the
// agent's goroutine it records the override, decides the service's
// eligible backends again and runs a pass for that service only. It
// returns the backend's state once the pass is done. Safe to call from any
// goroutine while Run runs.
func (a *Agent) ChangeBackend(ctx context.Context, c planner.BackendChange) (BackendState, error) {
	if a.snap.Load() == nil {
		return BackendState{}, errNotReady
	}
	r := backendRequest{change: c, reply: make(chan backendReply, 1)}
	select {
	case a.reqs <- r:
	case <-ctx.Done():
		return BackendState{}, ctx.Err()
	case <-a.stopped:
		return BackendState{}, errStopping
	}
	got := <-r.reply // the loop answers every request it takes
	return got.state, got.err
}

// changeBackend is ChangeBackend on the agent's goroutine; ctx is the
// loop's (a client that hangs up does not cut a pass short).
func (a *Agent) changeBackend(ctx context.Context, c planner.BackendChange) (BackendState, error) {
	next, ov, err := a.overrides.With(a.cfg.Services, c, a.opts.Now())
	if err != nil {
		return BackendState{}, err
	}
	if err := SaveOverrides(a.cfg.Agent.StateDir, next); err != nil {
		return BackendState{}, fmt.Errorf("recording the override; nothing changed: %w", err)
	}
	a.overrides = next
	a.log.Info("backend override", "event", "override", "action", c.Action, "service", ov.Service,
		"backend", ov.Backend, "drained", ov.Drained, "weight", weightOrFile(ov.Weight))
	names := map[string]bool{c.Service: true}
	a.applyHealth(names)
	a.pending.add(a.cfg.serviceKeys(names)...)
	a.reconcile(ctx)
	a.republish()
	st := a.backendState(a.snap.Load(), ov)
	st.PassError = a.snap.Load().err
	return st, nil
}

func weightOrFile(w *int) string {
	if w == nil {
		return "file"
	}
	return strconv.Itoa(*w)
}

// backendState describes the backend of ov as snapshot s has it.
func (a *Agent) backendState(s *snapshot, ov planner.BackendOverride) BackendState {
	st := BackendState{BackendOverride: ov, ConfiguredWeight: -1, Kernel: []KernelWeight{}}
	key := ov.Key()
	for _, svc := range s.cfg.Services {
		if svc.Name != ov.Service {
			continue
		}
		for _, b := range svc.Backends {
			if planner.HealthKey(svc.Name, b) == key {
				st.ConfiguredWeight = b.Weight
			}
		}
	}
	for _, k := range planner.ServicesOf(s.desired, map[string]bool{ov.Service: true}) {
		vs, _ := planner.FindService(s.desired, k)
		for _, dst := range vs.Destinations {
			if dst.Backend != key {
				continue
			}
			kw := KernelWeight{IPVSService: k.String(), Destination: dst.DestinationKey.String(), Weight: -1}
			for _, cur := range s.actual.Services.At(k).Destinations {
				if cur.DestinationKey == dst.DestinationKey {
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
func (a *Agent) Backends() ([]BackendState, error) {
	s := a.snap.Load()
	if s == nil {
		return nil, errNotReady
	}
	out := []BackendState{}
	for _, ov := range s.overrides.List() {
		out = append(out, a.backendState(s, ov))
	}
	return out, nil
}

// pruneOverrides drops the overrides of backends the configuration in
// force no longer has, and logs each.
func (a *Agent) pruneOverrides() {
	kept, dropped := a.overrides.Pruned(a.cfg.Services)
	if len(dropped) == 0 {
		return
	}
	for _, ov := range dropped {
		a.log.Warn("backend override dropped: the configuration no longer has the backend", "event", "override",
			"service", ov.Service, "backend", ov.Backend, "drained", ov.Drained, "weight", weightOrFile(ov.Weight))
	}
	if err := SaveOverrides(a.cfg.Agent.StateDir, kept); err != nil {
		// Dropped all the same: the next start drops them again.
		a.log.Error("saving backend overrides", "err", err)
	}
	a.overrides = kept
}

// serveBackends adds the runtime control of backends to mux.
func (a *Agent) serveBackends(mux *http.ServeMux) {
	mux.HandleFunc("GET "+RouteBackends, func(w http.ResponseWriter, r *http.Request) {
		list, err := a.Backends()
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
		st, err := a.ChangeBackend(r.Context(), c)
		var refused *planner.ChangeError
		switch {
		case errors.As(err, &refused) && refused.NotFound:
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.As(err, &refused):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case errors.Is(err, errNotReady), errors.Is(err, errStopping):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			api.WriteJSON(w, BackendAnswer{Schema: api.SchemaVersion, BackendState: st})
		}
	})
}
