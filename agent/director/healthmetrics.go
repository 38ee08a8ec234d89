package director

import (
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descChecksInFlight = metrics.Desc("health_checks_in_flight",
		"Health checks running now.")
	descChecksMaxInFlight = metrics.Desc("health_checks_max_in_flight",
		"The bound on health checks running at once (health_checks.max_in_flight).")
	descRoundsDelayed = metrics.Desc("health_rounds_delayed_total",
		"Health-check rounds that waited for a slot because as many checks as allowed were running.")
	descRoundsNotCounted = metrics.Desc("health_rounds_not_counted_total",
		"Health-check rounds not counted because a check could not run on this host (out of file descriptors).")
)

// HealthMetrics exports how the health checks share the host: what runs,
// the bound, the rounds delayed by it and those not counted. m may be nil
// (Describe only).
type HealthMetrics struct{ m *health.Monitor }

// NewHealthMetrics returns the collector of m's scheduling figures.
func NewHealthMetrics(m *health.Monitor) HealthMetrics { return HealthMetrics{m} }

// Describe implements prometheus.Collector.
func (h HealthMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descChecksInFlight
	ch <- descChecksMaxInFlight
	ch <- descRoundsDelayed
	ch <- descRoundsNotCounted
}

// Collect implements prometheus.Collector.
func (h HealthMetrics) Collect(ch chan<- prometheus.Metric) {
	if h.m == nil {
		return
	}
	st := h.m.Stats()
	ch <- prometheus.MustNewConstMetric(descChecksInFlight, prometheus.GaugeValue, float64(st.InFlight))
	ch <- prometheus.MustNewConstMetric(descChecksMaxInFlight, prometheus.GaugeValue, float64(st.MaxInFlight))
	ch <- prometheus.MustNewConstMetric(descRoundsDelayed, prometheus.CounterValue, float64(st.Delayed))
	ch <- prometheus.MustNewConstMetric(descRoundsNotCounted, prometheus.CounterValue, float64(st.NotCounted))
}
