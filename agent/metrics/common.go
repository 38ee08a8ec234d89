package metrics

import (
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Desc describes the series lvsd_<name>.
func Desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("lvsd_"+name, help, labels, nil)
}

// The series both roles export (docs/operations.md), defined once so that a
// dashboard or an alert reads them alike on directors and real servers.
var (
	buildInfo = Desc("build_info", "Always 1; the labels say which lvsd runs.", "version", "goversion")
	configOK  = Desc("config_last_reload_successful", "1 if the last attempt to load the configuration "+
		"(start, signal or edited file) succeeded; 0: the files on disk were rejected and the previous configuration runs.")
	configAt = Desc("config_last_reload_success_timestamp_seconds",
		"When the configuration in force was loaded, as a Unix time.")

	// Common are their descriptions, for Describe.
	Common = []*prometheus.Desc{buildInfo, configOK, configAt}
)

// CollectBuildInfo sends lvsd_build_info of version.
func CollectBuildInfo(ch chan<- prometheus.Metric, version string) {
	ch <- prometheus.MustNewConstMetric(buildInfo, prometheus.GaugeValue, 1, version, runtime.Version())
}

// CollectConfigLoad sends the configuration series: whether the last
// attempt to load the files succeeded, and when the configuration in force
// was loaded.
func CollectConfigLoad(ch chan<- prometheus.Metric, ok bool, lastGood time.Time) {
	ch <- prometheus.MustNewConstMetric(configOK, prometheus.GaugeValue, Bool(ok))
	ch <- prometheus.MustNewConstMetric(configAt, prometheus.GaugeValue, float64(lastGood.UnixNano())/1e9)
}

// Bool is a boolean as a gauge value: 1 or 0.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
