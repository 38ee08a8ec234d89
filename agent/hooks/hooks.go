package hooks

import (
	"net/netip"
	"strconv"
	"time"
)

// Kind names a hook: which events it is run for.
type Kind string

// The hooks.
const (
	// Ownership events: this director took (StateTaken) or released
	// (StateReleased) a VIP.
	Ownership Kind = "ownership"
	// Health events: a backend became healthy or unhealthy.
	Health Kind = "health"
)

// Kinds are the hooks, in a fixed order (metrics, logs).
var Kinds = []Kind{Ownership, Health}

// States an event reports (LVSD_STATE).
const (
	StateTaken     = "taken"
	StateReleased  = "released"
	StateHealthy   = "healthy"
	StateUnhealthy = "unhealthy"
)

// Event is one thing that happened, as a hook sees it.
type Event struct {
	Kind    Kind
	State   string     // one of the State constants
	VIP     netip.Addr // ownership events
	Service string     // health events: the service of the backend
	Backend string     // health events: "address:port" as the service names it
	Time    time.Time  // when it happened; zero: when it was reported
}

// env is the event's environment for the hook: LVSD_EVENT, LVSD_STATE,
// LVSD_NODE, LVSD_TIME, LVSD_SEQ and the keys the event has.
func (e Event) env(node string, seq uint64) []string {
	out := []string{
		"LVSD_EVENT=" + string(e.Kind),
		"LVSD_STATE=" + e.State,
		"LVSD_NODE=" + node,
		"LVSD_TIME=" + e.Time.UTC().Format(time.RFC3339Nano),
		"LVSD_SEQ=" + strconv.FormatUint(seq, 10),
	}
	if e.VIP.IsValid() {
		out = append(out, "LVSD_VIP="+e.VIP.String())
	}
	if e.Service != "" {
		out = append(out, "LVSD_SERVICE="+e.Service)
	}
	if e.Backend != "" {
		out = append(out, "LVSD_BACKEND="+e.Backend)
	}
	return out
}
