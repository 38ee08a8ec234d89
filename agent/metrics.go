package agent

import (
	"context"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/histogram"
	"github.com/lvsd/lvsd/agent/metrics"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/prometheus/client_golang/prometheus"
)

// ReconcileStats counts the reconciler's passes since the agent started.
type ReconcileStats struct {
	Passes       uint64              // passes run
	Failed       uint64              // passes that ended with an error
	Durations    histogram.Durations // of every pass
	Last         time.Time           // start of the last pass; zero before the first
	LastDuration time.Duration
	LastError    string // "" when the last pass succeeded
	Services     int    // IPVS services the last pass wanted
	// Resets counts destinations deleted to drop their connections
	// (persistence_on_unhealthy, drain_on_failover false).
	Resets uint64
}

// next counts pass s on top of the previous snapshot (nil before the first
// pass). Only the owner goroutine publishes, so the counts never race.
func (prev *snapshot) next(s *snapshot) ReconcileStats {
	var r ReconcileStats
	if prev != nil {
		r = prev.passes
	}
	r.Passes++
	if s.err != "" {
		r.Failed++
	}
	r.Durations.Observe(s.duration)
	r.Last, r.LastDuration, r.LastError = s.at, s.duration, s.err
	r.Services = len(s.desired.Services)
	r.Resets += s.resets
	return r
}

// ConfigLoad is the outcome of the last attempt to load the configuration
// (at start, at a signal, after an edit).
type ConfigLoad struct {
	At       time.Time // of the attempt
	Err      string    // why it was rejected; "" when it was taken
	LastGood time.Time // when the configuration in force was loaded
}

// loadedConfig records an attempt to load the configuration at now.
func (a *Agent) loadedConfig(now time.Time, err error) {
	a.loaded.At = now
	if err != nil {
		a.loaded.Err = err.Error()
	} else {
		a.loaded.Err, a.loaded.LastGood = "", now
	}
	// A rejected (or unchanged) configuration runs no pass, which is what
	// publishes: the status and the metrics must see the attempt anyway.
	if prev := a.snap.Load(); prev != nil {
		s := *prev
		s.loaded = a.loaded
		a.snap.Store(&s)
	}
}

// Reconciles returns the pass counts; ok is false before the first pass has
// finished. Safe to call from any goroutine.
func (a *Agent) Reconciles() (st ReconcileStats, ok bool) {
	s := a.snap.Load()
	if s == nil {
		return ReconcileStats{}, false
	}
	return s.passes, true
}

// Stalled reports whether the reconcile loop looks stuck at now: it passes at
// least every Resync (plus a Check tick), so no finished pass for twice that
// means it hangs (e.g. a netlink call that never returns). Before the first
// pass it is never stalled: a slow start is not a hang. The systemd watchdog
// stops being fed when this is true.
func (a *Agent) Stalled(now time.Time) bool {
	s, ok := a.Reconciles()
	if !ok {
		return false
	}
	return now.Sub(s.Last.Add(s.LastDuration)) > 2*a.opts.Resync+a.opts.Check
}

func (d *DestinationStatus) setStats(s ipvs.Stats) {
	d.Connections, d.PacketsIn, d.PacketsOut, d.BytesIn, d.BytesOut =
		s.Connections, s.PacketsIn, s.PacketsOut, s.BytesIn, s.BytesOut
	d.Rates = ratesOf(s.Rates)
}

// healthStates is the checker's view now; nil without health checking.
func (a *Agent) healthStates() map[string]health.State {
	if a.opts.Health == nil {
		return nil
	}
	return a.opts.Health.Snapshot()
}

// setHealth fills in the health of the backend with HealthKey key of a
// service whose eligibility is elig.
func (d *DestinationStatus) setHealth(states map[string]health.State, elig planner.Eligibility, checked *planner.CopyOnWriteMap[string, int], key string) {
	var st health.State
	d.Eligible = elig.Eligible(key)
	d.Health, st = healthOf(states, checked, key)
	d.ReportedWeight = st.Weight
	if d.Health == healthUnhealthy {
		d.HealthError = st.LastError
	}
}

// checkedBackends counts, by HealthKey, the backends of c's services that
// have health checks. With prev, c is prev with the services in names
// changed, and only theirs are counted again.
func checkedBackends(prev, c *LoadedConfig, names map[string]bool) planner.CopyOnWriteMap[string, int] {
	var out planner.CopyOnWriteMap[string, int]
	count := func(services []*config.Service, delta int) {
		for _, s := range services {
			for _, b := range s.Backends {
				if b.Health == nil {
					continue
				}
				k := planner.HealthKey(s.Name, b)
				if n := out.At(k) + delta; n > 0 {
					out.Set(k, n)
				} else {
					out.Delete(k)
				}
			}
		}
	}
	if prev == nil || names == nil {
		count(c.Services, 1)
		return out
	}
	out = prev.checked.Clone()
	count(prev.named(names), -1)
	count(c.named(names), 1)
	return out
}

// Label sets of the per-service and per-backend series. service is the name
// in the service file; ipvs_service the kernel's virtual service
// ("tcp:10.0.0.50:80", "fwmark:7/ipv4"): a file service with several ports
// is several IPVS services. backend is "address:port".
var (
	serviceLabels = []string{"service", "ipvs_service"}
	backendLabels = []string{"service", "ipvs_service", "backend"}
)

var desc = metrics.Desc

// Metric descriptions (docs/operations.md lists them with examples).
var (
	descReady  = desc("ready", "1 once the first reconcile pass has finished.")
	descPasses = desc("reconcile_duration_seconds",
		"How long reconcile passes took (read the kernel, plan, apply); the count is the number of passes.")
	descErrors = desc("reconcile_errors_total",
		"Reconcile passes that ended with an error (kernel read or some change failed); they are retried.")
	descResets = desc("connection_resets_total",
		"Destinations whose connections lvsd dropped: unhealthy where connections do not persist "+
			"(persistence_on_unhealthy), or every destination of a service at failover with drain_on_failover false.")
	descLastPass = desc("last_reconcile_timestamp_seconds", "When the last reconcile pass finished, as a Unix time.")
	descLastOK   = desc("last_reconcile_success", "1 if the last reconcile pass succeeded, else 0.")
)

// Collector exports an agent's state to Prometheus. It keeps nothing: each
// scrape reads Status (the kernel, now, or the last pass's read-back above
// FreshLimit services) and Reconciles, so the agent's owner goroutine stays
// the only owner of the state. metrics.per_backend: false leaves out the
// series per backend (metrics_service.go).
type Collector struct {
	a       *Agent
	version string
	timeout time.Duration
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for a; version labels lvsd_build_info.
func NewCollector(a *Agent, version string) *Collector {
	return &Collector{a: a, version: version, timeout: 10 * time.Second}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReady, descPasses, descErrors, descResets, descLastPass, descLastOK} {
		ch <- d
	}
	for _, d := range slices.Concat(metrics.Common, serviceDescs, backendDescs, clusterDescs, bgpDescs, healthDescs) {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Before the first pass only the
// build info and lvsd_ready 0 are exported; a failed kernel read fails the
// scrape (Prometheus then shows up == 0) rather than report stale numbers.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	metrics.CollectBuildInfo(ch, c.version)
	r, ok := c.a.Reconciles()
	if !ok {
		gauge(descReady, 0)
		return
	}
	gauge(descReady, 1)
	snap := c.a.snap.Load()
	metrics.CollectConfigLoad(ch, snap.loaded.Err == "", snap.loaded.LastGood)
	perBackend := snap.cfg.Agent.MetricsPerBackend
	collectHealth(snap.cfg, c.a.healthStates(), perBackend, ch, gauge, counter)
	ch <- prometheus.MustNewConstHistogram(descPasses, r.Durations.Count(), r.Durations.Sum(), r.Durations.Buckets())
	counter(descErrors, r.Failed)
	counter(descResets, r.Resets)
	gauge(descLastPass, float64(r.Last.Add(r.LastDuration).UnixNano())/1e9)
	gauge(descLastOK, b2f(r.LastError == ""))

	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	view := ViewServices // counts per service, no destination formatted
	if perBackend {
		view = ViewFull
	}
	st, err := c.a.Status(ctx, StatusQuery{View: view})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descServiceInKernel, err)
		return
	}
	if st.Cluster != nil {
		collectCluster(st.Cluster, gauge, counter)
	}
	if st.ConnSync != nil {
		collectConnSync(st.ConnSync, gauge, counter)
	}
	if st.PeerFlows != nil {
		collectPeerFlows(st.PeerFlows, counter)
	}
	if st.BGP != nil {
		collectBGP(st.BGP, st.Drained, gauge, counter)
	}
	for _, s := range st.Services {
		collectService(s, gauge, counter)
		if perBackend {
			collectBackends(s, gauge, counter)
		}
	}
}

var b2f = metrics.Bool
