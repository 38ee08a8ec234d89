package views

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/histogram"
	"github.com/lvsd/lvsd/agent/planner"
)

// Metrics of health checking (docs/operations.md).
// Health series are per backend with checks: backend is its address, with
// the port when the service file gives one, as in HealthKey.
var (
	descHealthRounds = desc("backend_health_checks_total", "Health-check rounds of the backend (all its checks "+
		"at once) since it was added, by result: pass or fail.", "service", "backend", "result")
	descHealthLast = desc("backend_health_check_duration_seconds",
		"How long the backend's last health-check round took (its slowest check).", "service", "backend")
	descHealthTransitions = desc("backend_health_transitions_total",
		"Times the backend turned healthy or unhealthy after its first round (rise and fall included).",
		"service", "backend")
	descHealthDurations = desc("health_check_duration_seconds",
		"How long the health-check rounds of the service's backends took.", "service")
)

var healthDescs = []*prometheus.Desc{descHealthRounds, descHealthLast,
	descHealthTransitions, descHealthDurations}

// collectHealth exports the checker's view of every backend with checks of
// cfg's services: per backend unless perBackend is false, per service.
func collectHealth(cfg *agent.LoadedConfig, read healthReader, perBackend bool, ch chan<- prometheus.Metric,
	gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string)) {
	if read == nil {
		return
	}
	var states backendStates // a service's at a time: no copy of every target's state
	var keys []string
	for _, s := range cfg.Services {
		keys = keys[:0]
		for _, b := range s.Backends {
			if b.Health != nil {
				keys = append(keys, planner.HealthKey(s.Name, b))
			}
		}
		if len(keys) == 0 {
			continue
		}
		if !perBackend {
			collectServiceHealth(s.Name, keys, read, &states, ch)
			continue
		}
		states.read(read, keys)
		var rounds histogram.Durations
		checked := false
		for i, key := range keys {
			st, ok := states.states[i], states.found[i]
			if !ok {
				continue
			}
			if !checked {
				rounds = st.Durations // its group's, the service's: the same in every backend's state
			}
			checked = true
			backend := strings.TrimPrefix(key, s.Name+"/")
			counter(descHealthRounds, st.Rounds-st.FailedRounds, s.Name, backend, "pass")
			counter(descHealthRounds, st.FailedRounds, s.Name, backend, "fail")
			counter(descHealthTransitions, st.Transitions, s.Name, backend)
			if st.Rounds > 0 {
				gauge(descHealthLast, st.LastDuration.Seconds(), s.Name, backend)
			}
		}
		if checked {
			ch <- prometheus.MustNewConstHistogram(descHealthDurations, rounds.Count(), rounds.Sum(), rounds.Buckets(), s.Name)
		}
	}
}

// collectServiceHealth exports the durations of the rounds of service's
// backends (their keys), without the series per backend: the first
// backend the checker has carries them (every backend's state holds its
// group's), so one is read, not all.
func collectServiceHealth(service string, keys []string, read healthReader, states *backendStates, ch chan<- prometheus.Metric) {
	for i := range keys {
		if states.read(read, keys[i:i+1]); states.found[0] {
			rounds := states.states[0].Durations
			ch <- prometheus.MustNewConstHistogram(descHealthDurations, rounds.Count(), rounds.Sum(), rounds.Buckets(), service)
			return
		}
	}
}
