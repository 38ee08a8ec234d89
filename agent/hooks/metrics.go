package hooks

import (
	"github.com/lvsd/lvsd/agent/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descRuns = metrics.Desc("hook_runs_total",
		"Runs of an event hook by how they ended (ok, failed, timeout, error: could not start).", "hook", "result")
	descDropped = metrics.Desc("hook_dropped_total",
		"Events an event hook lost because its queue was full.", "hook")
)

// Stats are a hook's counters.
type Stats struct {
	Runs    [numResults]uint64 // by Outcome
	Dropped uint64
}

// Stats returns the counters of the hook of kind k (zero without one).
func (r *Runner) Stats(k Kind) Stats {
	var s Stats
	if r == nil || r.hooks[k] == nil {
		return s
	}
	h := r.hooks[k]
	for i := range s.Runs {
		s.Runs[i] = h.runs[i].Load()
	}
	s.Dropped = h.dropped.Load()
	return s
}

// Describe implements prometheus.Collector.
func (r *Runner) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRuns
	ch <- descDropped
}

// Collect implements prometheus.Collector: the counters of the configured
// hooks.
func (r *Runner) Collect(ch chan<- prometheus.Metric) {
	if r == nil {
		return
	}
	for _, k := range Kinds {
		if r.hooks[k] == nil {
			continue
		}
		s := r.Stats(k)
		for o := range numResults {
			ch <- prometheus.MustNewConstMetric(descRuns, prometheus.CounterValue, float64(s.Runs[o]), string(k), o.String())
		}
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.Dropped), string(k))
	}
}
