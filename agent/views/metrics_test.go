package views

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/histogram"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it):\n%s", path, t.Name(), lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only in want (-) or only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// gather collects c through a pedantic registry, which checks the
// descriptions against what is collected.
func gather(t *testing.T, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// scrape renders c in the Prometheus text format.
func scrape(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	var b strings.Builder
	for _, f := range gather(t, c) {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return strings.ReplaceAll(b.String(), runtime.Version(), "GOVERSION")
}

// TestMetrics: names, units, labels and values of the series after two
// passes, one of which left a backend draining, with health checks
// (testdata/metrics.golden). The pedantic registry checks the
// descriptions against what is collected.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	checker := &fakeHealth{} // no states until the second pass
	a := e.agentWith(agent.Options{Health: checker})
	c := NewCollector(a, "1.2.3")
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP lvsd_ready 1 once the first reconcile pass has finished.
# TYPE lvsd_ready gauge
lvsd_ready 0
`), "lvsd_ready", "lvsd_reconcile_errors_total", "lvsd_backend_weight"); err != nil {
		t.Fatalf("before the first pass: %v", err)
	}

	e.reconcile(a)
	svc := ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	rs2 := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 80}
	e.ipvs.SetConns(svc, rs2, 2, 1)
	e.ipvs.SetStats(svc, rs2, ipvs.Stats{Connections: 9, PacketsIn: 5 << 32, PacketsOut: 0, BytesIn: 6400})
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11, weight: 3, "+
		"health: {checks: [{type: tcp}]}}\n")
	e.reload(a)
	var rounds histogram.Durations
	rounds.Observe(3 * time.Millisecond)
	rounds.Observe(40 * time.Millisecond)
	checker.states = map[string]health.State{"web/10.0.0.11": {Known: true, Healthy: true, Weight: -1,
		Rounds: 2, FailedRounds: 1, Transitions: 1, Durations: rounds, LastDuration: 40 * time.Millisecond}}
	e.now = e.now.Add(time.Second)
	e.reconcile(a)
	e.now = e.now.Add(7 * time.Second)

	golden(t, "metrics.golden", scrape(t, c))
	// promlint: base units, _total on counters, no camelCase, …
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestMetricsNoNameClash: no gauge or histogram is named like a counter
// without its _total (OpenMetrics parses a counter foo_total as family
// foo), and no two families share a name once _total, _bucket, _sum or
// _count are cut off.
func TestMetricsNoNameClash(t *testing.T) {
	seen := map[string]string{}
	for _, d := range describe(NewCollector(nil, "")) {
		name := descName(d)
		base := name
		for _, suffix := range []string{"_total", "_bucket", "_sum", "_count", "_created"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if other, ok := seen[base]; ok {
			t.Errorf("%s and %s are one family to OpenMetrics", other, name)
		}
		seen[base] = name
	}
	if len(seen) < 30 {
		t.Errorf("only %d metrics described", len(seen))
	}
}

// describe lists what c describes.
func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc, 256)
	c.Describe(ch)
	close(ch)
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// descName is the fqName of d (the client library does not expose it).
func descName(d *prometheus.Desc) string {
	s := d.String()
	_, rest, _ := strings.Cut(s, `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}

// TestMetricsCountFailedPasses: a pass that fails counts as an error and
// flips lvsd_last_reconcile_success; the next good pass flips it back.
func TestMetricsCountFailedPasses(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	broken := &brokenIPVS{Interface: e.ipvs}
	k := e.kernel()
	k.IPVS = broken
	a := e.agentWith(agent.Options{Kernel: k})
	c := NewCollector(a, "dev")
	e.reconcile(a)
	broken.broken = true
	e.resync(a)
	broken.broken = false
	check := func(want string) {
		t.Helper()
		if err := testutil.CollectAndCompare(c, strings.NewReader(want),
			"lvsd_reconcile_errors_total", "lvsd_last_reconcile_success"); err != nil {
			t.Fatal(err)
		}
	}
	check(`
# HELP lvsd_last_reconcile_success 1 if the last reconcile pass succeeded, else 0.
# TYPE lvsd_last_reconcile_success gauge
lvsd_last_reconcile_success 0
# HELP lvsd_reconcile_errors_total Reconcile passes that ended with an error (kernel read or some change failed); they are retried.
# TYPE lvsd_reconcile_errors_total counter
lvsd_reconcile_errors_total 1
`)
	e.reconcile(a)
	check(`
# HELP lvsd_last_reconcile_success 1 if the last reconcile pass succeeded, else 0.
# TYPE lvsd_last_reconcile_success gauge
lvsd_last_reconcile_success 1
# HELP lvsd_reconcile_errors_total Reconcile passes that ended with an error (kernel read or some change failed); they are retried.
# TYPE lvsd_reconcile_errors_total counter
lvsd_reconcile_errors_total 1
`)
	if st, _ := a.a.Reconciles(); st.Passes != 3 || st.Failed != 1 {
		t.Errorf("Reconciles() = %+v, want 3 passes, 1 failed", st)
	}
}

// brokenIPVS fails every read while broken, as a kernel without IPVS
// would.
type brokenIPVS struct {
	ipvs.Interface
	broken bool
}

func (b *brokenIPVS) Services(ctx context.Context) ([]ipvs.Service, error) {
	if b.broken {
		return nil, errors.New("netlink: boom")
	}
	return b.Interface.Services(ctx)
}

// TestMetricsHealth: checked backends export lvsd_backend_healthy, and an
// unhealthy one (weight 0) is not counted as eligible; lvsd status shows
// why it fails.
func TestMetricsHealth(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nhealth: {checks: [{type: tcp}]}\n"+
		"backends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n  - {address: 10.0.0.13, health: {checks: [{type: tcp}]}}\n")
	a := e.agentWith(agent.Options{Health: &fakeHealth{states: map[string]health.State{
		"web/10.0.0.11": {Known: true, Healthy: true, Weight: -1},
		"web/10.0.0.12": {Known: true, Healthy: false, Weight: -1, LastError: "tcp: connection refused"},
	}}})
	e.reconcile(a)
	want := `
# HELP lvsd_backend_healthy 0 if the backend fails its health checks, else 1 (backends start healthy, before their first round). Absent for backends without checks.
# TYPE lvsd_backend_healthy gauge
lvsd_backend_healthy{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 1
lvsd_backend_healthy{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
lvsd_backend_healthy{backend="10.0.0.13:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 1
# HELP lvsd_service_eligible_backends Backends taking new connections now (kernel weight above 0); 0 means the service refuses new clients.
# TYPE lvsd_service_eligible_backends gauge
lvsd_service_eligible_backends{ipvs_service="tcp:10.0.0.50:80",service="web"} 2
`
	if err := testutil.CollectAndCompare(NewCollector(a, "dev"), strings.NewReader(want),
		"lvsd_backend_healthy", "lvsd_service_eligible_backends"); err != nil {
		t.Fatal(err)
	}
	st, err := a.Status(context.Background(), StatusQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range st.Services[0].Destinations {
		got = append(got, fmt.Sprintf("%s %s %q w=%d", d.Address, d.Health, d.HealthError, d.Weight))
	}
	wantStatus := []string{`10.0.0.11:80 healthy "" w=1`, `10.0.0.12:80 unhealthy "tcp: connection refused" w=0`,
		`10.0.0.13:80 pending "" w=1`}
	if !slices.Equal(got, wantStatus) {
		t.Errorf("status destinations:\n got %q\nwant %q", got, wantStatus)
	}
}

// TestMetricsConfigRejected: a rejected edit turns
// lvsd_config_last_reload_successful to 0 and keeps the time of the
// configuration in force; lvsd status says why. A good edit turns it back.
func TestMetricsConfigRejected(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	c := NewCollector(a, "dev")
	e.reconcile(a)
	e.now = e.now.Add(time.Minute)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11, wieght: 2}\n")
	e.reload(a)
	e.reconcile(a)
	check := func(ok int, at int) {
		t.Helper()
		want := fmt.Sprintf(`
# HELP lvsd_config_last_reload_success_timestamp_seconds When the configuration in force was loaded, as a Unix time.
# TYPE lvsd_config_last_reload_success_timestamp_seconds gauge
lvsd_config_last_reload_success_timestamp_seconds %d
# HELP lvsd_config_last_reload_successful 1 if the last attempt to load the configuration (start, signal or edited file) succeeded; 0: the files on disk were rejected and the previous configuration runs.
# TYPE lvsd_config_last_reload_successful gauge
lvsd_config_last_reload_successful %d
`, at, ok)
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "lvsd_config_last_reload_successful",
			"lvsd_config_last_reload_success_timestamp_seconds"); err != nil {
			t.Fatal(err)
		}
	}
	check(0, 1000)
	st, err := a.Status(context.Background(), StatusQuery{})
	if err != nil || !strings.Contains(st.ConfigError, `unknown key "wieght"`) || st.ConfigLoadedAt.Unix() != 1000 {
		t.Errorf("status: config error %q, loaded at %v (%v)", st.ConfigError, st.ConfigLoadedAt, err)
	}
	e.service("web", webTwo)
	e.reload(a)
	e.reconcile(a)
	check(1, 1060)
}

// The overrides show in the metrics: the drain and the weight, next to the
// kernel's and the file's weights.
func TestMetricsOverrides(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.run(e.unstarted(agent.Options{})) // changes go through the agent's loop
	for _, c := range []planner.BackendChange{
		{Action: planner.ActionDrain, Service: "web", Backend: "10.0.0.11"},
		{Action: planner.ActionWeight, Service: "web", Backend: "10.0.0.12", Weight: 3},
	} {
		if _, err := a.ChangeBackend(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP lvsd_backend_override_drained 1 while an operator drains the backend at run time (lvsd backend drain: weight 0, its connections go on). Absent otherwise.
# TYPE lvsd_backend_override_drained gauge
lvsd_backend_override_drained{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 1
# HELP lvsd_backend_override_weight The weight an operator set at run time (lvsd backend weight), which replaces the file's. Absent without one.
# TYPE lvsd_backend_override_weight gauge
lvsd_backend_override_weight{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 3
# HELP lvsd_backend_weight The backend's weight in the kernel now (the effective weight; 0 while it drains). Absent when it is not in the kernel.
# TYPE lvsd_backend_weight gauge
lvsd_backend_weight{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
lvsd_backend_weight{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 3
`
	if err := testutil.CollectAndCompare(NewCollector(a, "dev"), strings.NewReader(want),
		"lvsd_backend_override_drained", "lvsd_backend_override_weight", "lvsd_backend_weight"); err != nil {
		t.Fatal(err)
	}
}
