package realserver

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent/metrics"
)

// configLoad is the outcome of the last attempt to load the agent file.
type configLoad struct {
	At, LastGood time.Time
	Err          string // "" when it was taken
}

// probes counts the weight endpoint's answers to the directors' health
// checks; the handlers count, the collector reads.
type probes struct {
	ok, drained, unhealthy atomic.Uint64
	last                   atomic.Int64 // Unix nanoseconds of the last answer; 0: none yet
}

func (p *probes) count(now time.Time, c *atomic.Uint64) {
	c.Add(1)
	p.last.Store(now.UnixNano())
}

var desc = metrics.Desc

// Metrics of a real server (docs/operations.md).
var (
	descDrained = desc("realserver_drained", "1 while this real server is drained (lvsd drain): its weight "+
		"endpoint announces weight 0.")
	descWeight = desc("realserver_announced_weight", "The weight the weight endpoint announces now (0 while "+
		"drained; 503 and 0 while unhealthy: see lvsd_realserver_healthy).")
	descConfigured = desc("realserver_configured_weight", "realserver.weight in the agent file.")
	descHealthy    = desc("realserver_healthy", "1 if the weight endpoint answers 200: every VIP on lo, the "+
		"tunnels decapsulating, the local checks passing and the TOA programs in place.")
	descVIP = desc("realserver_vip_on_lo", "1 if the configured VIP is on lo, 0 if it is missing.", "vip")
	descTun = desc("realserver_tunnel_problems", "What the tunnel VIPs need and is not in place (a device down, "+
		"a GUE port closed); 0 when all decapsulates.")
	descCheck = desc("realserver_local_check_up", "1 if the local check passes now (run at the scrape).", "check")
	descProbe = desc("realserver_weight_probes_total", "The weight endpoint's answers to the directors' health "+
		"checks, by answer: ok (200), drained (200, weight 0), unhealthy (503).", "answer")
	descLastProbe = desc("realserver_last_probe_timestamp_seconds", "When a director last probed the weight "+
		"endpoint, as a Unix time; absent before the first probe. Without probes lvsd drain has no effect.")

	// The TOA programs' series (realserver.client_address), absent without
	// the block; the counters count since the programs' maps were created.
	descTOAInPlace = desc("realserver_toa_in_place", "1 if the TOA programs of realserver.client_address are "+
		"set up; 0: the last pass failed, the weight endpoint answers 503 and applications see the directors' address.")
	descTOAStored = desc("realserver_toa_stored_total", "Connections to a backend whose peer name is the "+
		"client's address and port, taken from the director's TCP option.")
	descTOANotDirector = desc("realserver_toa_not_director_total", "Connections to a backend from an address "+
		"that is not a director's: left as they are.")
	descTOANoOption = desc("realserver_toa_no_option_total", "Connections from a director whose SYN carried "+
		"no usable TOA option: the peer name stays the director's.")
	descTOANoSYN = desc("realserver_toa_no_saved_syn_total", "Connections whose listener did not keep its SYN "+
		"(opened before the programs were attached): restart the application.")
	toaDescs = []*prometheus.Desc{descTOAInPlace, descTOAStored, descTOANotDirector, descTOANoOption, descTOANoSYN}
)

// Collector exports a real server's state to Prometheus. It keeps nothing:
// each scrape reads the published Status and runs the local checks.
type Collector struct {
	a       *Agent
	version string
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for a; version labels lvsd_build_info.
func NewCollector(a *Agent, version string) *Collector { return &Collector{a: a, version: version} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append([]*prometheus.Desc{descDrained, descWeight, descConfigured, descHealthy, descVIP, descTun,
		descCheck, descProbe, descLastProbe}, append(toaDescs, metrics.Common...)...) {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	metrics.CollectBuildInfo(ch, c.version)
	st := c.a.status.Load()
	if st == nil {
		return
	}
	metrics.CollectConfigLoad(ch, st.ConfigError == "", st.ConfigLoadedAt)
	gauge(descDrained, b2f(st.Drained))
	gauge(descWeight, float64(st.Weight))
	gauge(descConfigured, float64(st.ConfiguredWeight))
	missing := map[string]bool{}
	for _, v := range st.MissingVIPs {
		missing[v.String()] = true
	}
	for _, v := range append(st.VIPs, st.TunnelVIPs...) {
		gauge(descVIP, b2f(!missing[v.String()]), v.String())
	}
	gauge(descTun, float64(len(st.DownTunnels)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	passing := true
	for _, r := range c.a.runChecks(ctx, st.checks) {
		gauge(descCheck, b2f(r.OK), r.Check)
		passing = passing && r.OK
	}
	gauge(descHealthy, b2f(passing && len(st.MissingVIPs) == 0 && len(st.DownTunnels) == 0 && !st.toaFailed()))
	c.collectTOA(ctx, ch, st)
	p := &c.a.probes
	for answer, n := range map[string]uint64{"ok": p.ok.Load(), "drained": p.drained.Load(), "unhealthy": p.unhealthy.Load()} {
		ch <- prometheus.MustNewConstMetric(descProbe, prometheus.CounterValue, float64(n), answer)
	}
	if last := p.last.Load(); last != 0 {
		gauge(descLastProbe, float64(last)/1e9)
	}
}

// collectTOA sends the TOA programs' series: four per-CPU counters read
// from their pinned map, whatever the traffic.
func (c *Collector) collectTOA(ctx context.Context, ch chan<- prometheus.Metric, st *Status) {
	prog := c.a.opts.Host.TOA
	if !st.toa.cfg.Enabled() || prog == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descTOAInPlace, prometheus.GaugeValue, b2f(!st.toaFailed()))
	n, err := prog.Stats(ctx)
	if err != nil {
		return // lvsd status says why; the other series stay scraped
	}
	for d, v := range map[*prometheus.Desc]uint64{descTOAStored: n.Stored, descTOANotDirector: n.NotDirector,
		descTOANoOption: n.NoOption, descTOANoSYN: n.NoSYN} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
}

var b2f = metrics.Bool
