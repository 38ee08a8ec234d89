package views

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent"
)

// Series of coordinated changes (cluster.coordinated_changes under ecmp).
var (
	descHeldServices = desc("coordinated_change_held_services", "Services whose changed definition this director has "+
		"loaded but keeps out of force until every live director advertises it; 0 when no change waits.")
	descHeldSeconds = desc("coordinated_change_held_seconds", "How long the change held for the other directors has "+
		"waited; 0 when none waits.")
	descCoordinated = desc("coordinated_changes_total", "Changed service definitions put in force: together (every "+
		"live director had them) or alone (after coordinated_changes.wait, while some director lagged).", "outcome")
)

var coordinationDescs = []*prometheus.Desc{descHeldServices, descHeldSeconds, descCoordinated}

func collectCoordination(c agent.Coordination, now time.Time, gauge func(*prometheus.Desc, float64, ...string),
	counter func(*prometheus.Desc, uint64, ...string)) {
	held, waited := 0, 0.0
	if h := c.Held; h != nil {
		held, waited = len(h.Lagging), now.Sub(h.Since).Seconds()
	}
	gauge(descHeldServices, float64(held))
	gauge(descHeldSeconds, waited)
	counter(descCoordinated, c.Together, "together")
	counter(descCoordinated, c.Alone, "alone")
}
