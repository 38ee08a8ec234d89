package views

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
)

// seriesByPrefix counts the series a scrape of c exports, by the prefix of
// their family's name up to its second underscore (lvsd_service_,
// lvsd_backend_, lvsd_health_, …).
func seriesByPrefix(t *testing.T, c prometheus.Collector) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, f := range gather(t, c) {
		parts := strings.SplitN(f.GetName(), "_", 3)
		n := len(f.GetMetric())
		if h := f.GetMetric()[0].GetHistogram(); h != nil {
			n *= len(h.GetBucket()) + 3 // the buckets, +Inf, _sum and _count
		}
		out[parts[0]+"_"+parts[1]+"_"] += n
	}
	return out
}

// Series per IPVS service and per backend, as docs/operations.md counts
// them: 13 a service; 10 a backend with checks (9 without); 4 more a
// checked backend for its checks and one histogram (19 series) a service
// with checks. metrics.per_backend: false exports no backend's series and
// keeps the services' whole.
func TestMetricsSeriesCount(t *testing.T) {
	const services, backends = 3, 4
	for _, perBackend := range []bool{true, false} {
		t.Run(fmt.Sprintf("per_backend=%v", perBackend), func(t *testing.T) {
			e := newEnv(t)
			writeTestFile(t, filepath.Join(e.dir, "lvsd.yaml"), fmt.Sprintf("node: d1\ninterface: eth0\n"+
				"services_dir: services.d\nstate_dir: state\nmetrics: {per_backend: %v}\n", perBackend))
			states := map[string]health.State{}
			var b strings.Builder
			for i := range services {
				fmt.Fprintf(&b, "---\nservice: s%d\nvip: 10.0.1.1\nports: [%d]\nhealth: {checks: [{type: tcp}]}\nbackends:\n",
					i, 1000+i)
				for j := range backends {
					fmt.Fprintf(&b, "  - {address: 10.0.2.%d}\n", j+1)
					states[fmt.Sprintf("s%d/10.0.2.%d", i, j+1)] = health.State{Known: true, Healthy: true,
						Weight: health.NoWeight, Rounds: 1}
				}
			}
			e.service("bulk", b.String())
			a := e.agentWith(agent.Options{Health: &fakeHealth{states: states}})
			e.reconcile(a)
			got := seriesByPrefix(t, NewCollector(a, "dev"))
			want := map[string]int{"lvsd_service_": 13 * services, "lvsd_health_": 19 * services}
			if perBackend {
				want["lvsd_backend_"] = (10 + 4) * services * backends
			}
			for prefix, n := range want {
				if got[prefix] != n {
					t.Errorf("%s*: %d series, want %d", prefix, got[prefix], n)
				}
			}
			if !perBackend && got["lvsd_backend_"] != 0 {
				t.Errorf("per_backend false: %d lvsd_backend_* series", got["lvsd_backend_"])
			}
		})
	}
}
