package views

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent/metrics"
)

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
	v       *Views
	version string
	timeout time.Duration
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector of v's agent; version labels
// lvsd_build_info.
func NewCollector(v *Views, version string) *Collector {
	return &Collector{v: v, version: version, timeout: 10 * time.Second}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReady, descPasses, descErrors, descResets, descLastPass, descLastOK} {
		ch <- d
	}
	for _, d := range slices.Concat(metrics.Common, serviceDescs, backendDescs, clusterDescs, bgpDescs, healthDescs, coordinationDescs, partsDescs, toaDescs) {
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
	r, ok := c.v.a.Reconciles()
	if !ok {
		gauge(descReady, 0)
		return
	}
	gauge(descReady, 1)
	snap := c.v.a.Published()
	metrics.CollectConfigLoad(ch, snap.Loaded.Err == "", snap.Loaded.LastGood)
	if snap.Config.Agent.Cluster != nil && snap.Config.Agent.Cluster.CoordinatedChanges.Enabled {
		collectCoordination(snap.Coordination, c.v.a.Now(), gauge, counter)
	}
	perBackend := snap.Config.Agent.MetricsPerBackend
	collectHealth(snap.Config, c.v.healthReader(), perBackend, ch, gauge, counter)
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
	st, err := c.v.Status(ctx, StatusQuery{View: view})
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
		collectPeerFlows(st.PeerFlows, gauge, counter)
	}
	collectVRRP(st.VRRP, gauge, counter)
	if st.ConfigSync != nil {
		collectConfigSync(st.ConfigSync, gauge)
	}
	if st.BGP != nil {
		collectBGP(st.BGP, st.Drained, gauge, counter)
	}
	if st.TOA != nil {
		collectTOA(st.TOA, gauge, counter)
	}
	for _, s := range st.Services {
		collectService(s, gauge, counter)
		if perBackend {
			collectBackends(s, gauge, counter)
		}
	}
}

var b2f = metrics.Bool
