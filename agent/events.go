package agent

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/hooks"
)

// Events takes the events the operator's hooks run for (hooks.Runner).
// Notify must return at once, whatever the hooks do: it is called on the
// VIP holder's goroutine, on the takeover path, and on the reconciler's.
type Events interface {
	Notify(hooks.Event)
}

// noEvents takes events for no hook.
type noEvents struct{}

func (noEvents) Notify(hooks.Event) {}

// ownershipEvents are the VIPs taken and released going from the VIPs held
// before (true entries) to those held now, in address order.
func ownershipEvents(before, now map[netip.Addr]bool) []hooks.Event {
	var out []hooks.Event
	for v, held := range now {
		if held && !before[v] {
			out = append(out, hooks.Event{Kind: hooks.Ownership, State: hooks.StateTaken, VIP: v})
		}
	}
	for v, held := range before {
		if held && !now[v] {
			out = append(out, hooks.Event{Kind: hooks.Ownership, State: hooks.StateReleased, VIP: v})
		}
	}
	slices.SortFunc(out, func(a, b hooks.Event) int { return a.VIP.Compare(b.VIP) })
	return out
}

// healthEvents are the backends whose health changed from before to now
// (by HealthKey), in key order. A backend not seen before counts as
// healthy, as the checker starts it: one found failing at its first
// rounds is reported, one found passing is not.
func healthEvents(before, now map[string]planner.BackendHealth) []hooks.Event {
	var out []hooks.Event
	for key, h := range now {
		was, seen := before[key]
		if (!seen || was.Healthy) == h.Healthy {
			continue
		}
		service, backend, _ := strings.Cut(key, "/")
		state := hooks.StateUnhealthy
		if h.Healthy {
			state = hooks.StateHealthy
		}
		out = append(out, hooks.Event{Kind: hooks.Health, State: state, Service: service, Backend: backend})
	}
	slices.SortFunc(out, func(a, b hooks.Event) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Backend, b.Backend))
	})
	return out
}
