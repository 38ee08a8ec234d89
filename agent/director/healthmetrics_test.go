package director

import (
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The collector shows the Monitor's figures under their documented names;
// without a Monitor it only describes them.
func TestHealthMetrics(t *testing.T) {
	tests := []struct {
		name string
		m    *health.Monitor
		want string
	}{
		{"a monitor bound to 7", health.NewMonitor(nil, health.WithMaxInFlight(7)), `
# HELP lvsd_health_checks_in_flight Health checks running now.
# TYPE lvsd_health_checks_in_flight gauge
lvsd_health_checks_in_flight 0
# HELP lvsd_health_checks_max_in_flight The bound on health checks running at once (health_checks.max_in_flight).
# TYPE lvsd_health_checks_max_in_flight gauge
lvsd_health_checks_max_in_flight 7
# HELP lvsd_health_rounds_delayed_total Health-check rounds that waited for a slot because as many checks as allowed were running.
# TYPE lvsd_health_rounds_delayed_total counter
lvsd_health_rounds_delayed_total 0
# HELP lvsd_health_rounds_not_counted_total Health-check rounds not counted because a check could not run on this host (out of file descriptors).
# TYPE lvsd_health_rounds_not_counted_total counter
lvsd_health_rounds_not_counted_total 0
`},
		{"no monitor", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := testutil.CollectAndCompare(NewHealthMetrics(tt.m), strings.NewReader(tt.want)); err != nil {
				t.Error(err)
			}
		})
	}
}
