package planner

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// BackendOverride is an operator's runtime change to one backend of one
// service (`lvsd backend drain|weight`), made without editing files. It is
// kept in state_dir/backends.json across restarts and stays in force when
// the service file changes the backend's weight (a deploy must not put a
// backend under maintenance back into service); it goes when the operator
// undoes it, or when the service file no longer has the backend
// (docs/operations.md, "Runtime control of backends").
type BackendOverride struct {
	Service string `json:"service"`
	// Backend is as the service file names it: the address, or
	// address:port when the file gives a port (HealthKey without the
	// service).
	Backend string `json:"backend"`
	// Drained: no new connections (weight 0, through the eligibility
	// policy as an administratively out backend); established ones go on.
	Drained   bool      `json:"drained,omitempty"`
	DrainedAt time.Time `json:"drained_at,omitzero"`
	// Weight replaces the file's weight; nil: the file's.
	Weight   *int      `json:"weight,omitempty"`
	WeightAt time.Time `json:"weight_at,omitzero"`
}

func (o BackendOverride) Key() string { return o.Service + "/" + o.Backend }

func (o BackendOverride) Empty() bool { return !o.Drained && o.Weight == nil }

// weight is the backend's weight with the override: the override's, else
// the file's (configured).
func (o BackendOverride) weight(configured int) int {
	if o.Weight != nil {
		return *o.Weight
	}
	return configured
}

// Overrides are the operator's overrides by HealthKey. A map in force is
// replaced, never modified: the status snapshot shares it.
type Overrides map[string]BackendOverride

// Actions on a backend (`lvsd backend ACTION SERVICE BACKEND`).
const (
	ActionDrain   = "drain"   // no new connections
	ActionUndrain = "undrain" // new connections again (a weight override stays)
	ActionWeight  = "weight"  // replace the file's weight
	ActionClear   = "clear"   // drop every override: the file decides again
)

// BackendChange is one operator request on a backend.
type BackendChange struct {
	Action  string
	Service string
	Backend string // address or address:port
	Weight  int    // ActionWeight only
}

// ChangeError is a change Overrides.With refuses: NotFound when it names
// a service or backend that is not configured (the API answers 404), else
// the request is wrong (400).
type ChangeError struct {
	NotFound bool
	Msg      string
}

func (e *ChangeError) Error() string { return e.Msg }

func notFound(format string, args ...any) error {
	return &ChangeError{NotFound: true, Msg: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) error {
	return &ChangeError{Msg: fmt.Sprintf(format, args...)}
}

// With returns the overrides with c applied at now, and the backend's
// override after it (empty when none is left). services are the
// configured ones: c must name one of their backends. o is not modified.
func (o Overrides) With(services []*config.Service, c BackendChange, now time.Time) (Overrides, BackendOverride, error) {
	i := slices.IndexFunc(services, func(s *config.Service) bool { return s.Name == c.Service })
	if i < 0 {
		names := make([]string, len(services))
		for j, s := range services {
			names[j] = s.Name
		}
		slices.Sort(names)
		return nil, BackendOverride{}, notFound("no service %q is configured (configured: %s)", c.Service, listOrNone(names))
	}
	b, err := findBackend(services[i], c.Backend)
	if err != nil {
		return nil, BackendOverride{}, err
	}
	key := HealthKey(c.Service, b)
	cur, ok := o[key]
	if !ok {
		cur = BackendOverride{Service: c.Service, Backend: strings.TrimPrefix(key, c.Service+"/")}
	}
	switch c.Action {
	case ActionDrain:
		if !cur.Drained {
			cur.Drained, cur.DrainedAt = true, now
		}
	case ActionUndrain:
		cur.Drained, cur.DrainedAt = false, time.Time{}
	case ActionWeight:
		if c.Weight < 0 || c.Weight > config.MaxWeight {
			return nil, BackendOverride{}, invalid("weight %d is out of range 0-%d (as in a service file)",
				c.Weight, config.MaxWeight)
		}
		w := c.Weight
		cur.Weight, cur.WeightAt = &w, now
	case ActionClear:
		cur = BackendOverride{Service: cur.Service, Backend: cur.Backend}
	default:
		return nil, BackendOverride{}, invalid("action %q is not one of drain, undrain, weight, clear", c.Action)
	}
	out := maps.Clone(o)
	if out == nil {
		out = Overrides{}
	}
	if cur.Empty() {
		delete(out, key)
	} else {
		out[key] = cur
	}
	return out, cur, nil
}

// findBackend returns the backend of s that arg names: its address, or
// address:port. An address alone must be unambiguous; address:port also
// names a backend without a port (it takes the client's port) when s
// listens on that port.
func findBackend(s *config.Service, arg string) (config.Backend, error) {
	var match func(config.Backend) bool
	if ap, err := netip.ParseAddrPort(arg); err == nil {
		match = func(b config.Backend) bool {
			return b.Addr == ap.Addr().Unmap() && (b.Port == ap.Port() || b.Port == 0 && listensOn(s, ap.Port()))
		}
	} else if addr, err := netip.ParseAddr(strings.Trim(arg, "[]")); err == nil {
		match = func(b config.Backend) bool { return b.Addr == addr.Unmap() }
	} else {
		return config.Backend{}, invalid("backend %q is not an address or address:port", arg)
	}
	var found []config.Backend
	var all []string
	for _, b := range s.Backends {
		all = append(all, strings.TrimPrefix(HealthKey(s.Name, b), s.Name+"/"))
		if match(b) {
			found = append(found, b)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return config.Backend{}, notFound("service %q has no backend %s (its backends: %s)", s.Name, arg, listOrNone(all))
	default:
		var names []string
		for _, b := range found {
			names = append(names, strings.TrimPrefix(HealthKey(s.Name, b), s.Name+"/"))
		}
		return config.Backend{}, invalid("backend %s of service %q is ambiguous: name one of %s", arg, s.Name, strings.Join(names, ", "))
	}
}

func listensOn(s *config.Service, port uint16) bool {
	if s.AllPorts {
		return true
	}
	return slices.ContainsFunc(s.Ports, func(r l4.PortRange) bool { return r.From <= port && port <= r.To })
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Pruned returns the overrides whose backend services still configure,
// and those dropped. o is not modified; nothing dropped returns o itself.
// It looks only at the backends of services with overrides: a reload
// among 10,000 services costs a name lookup each.
func (o Overrides) Pruned(services []*config.Service) (Overrides, []BackendOverride) {
	if len(o) == 0 {
		return o, nil
	}
	names := o.services()
	configured := map[string]bool{}
	for _, s := range services {
		if !names[s.Name] {
			continue
		}
		for _, b := range s.Backends {
			configured[HealthKey(s.Name, b)] = true
		}
	}
	var dropped []BackendOverride
	for key, ov := range o {
		if !configured[key] {
			dropped = append(dropped, ov)
		}
	}
	if len(dropped) == 0 {
		return o, nil
	}
	out := maps.Clone(o)
	for _, ov := range dropped {
		delete(out, ov.Key())
	}
	slices.SortFunc(dropped, func(a, b BackendOverride) int { return strings.Compare(a.Key(), b.Key()) })
	return out, dropped
}

// List returns the overrides sorted by service and backend.
func (o Overrides) List() []BackendOverride {
	out := slices.Collect(maps.Values(o))
	slices.SortFunc(out, func(a, b BackendOverride) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

// services returns the names of the services with overrides.
func (o Overrides) services() map[string]bool {
	out := map[string]bool{}
	for _, ov := range o {
		out[ov.Service] = true
	}
	return out
}
