package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetrics: names, units, labels and values of the series after two
// passes, one of which left a backend draining.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	c := NewCollector(a, "1.2.3")
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP lvsd_ready 1 once the first reconcile pass has finished.
# TYPE lvsd_ready gauge
lvsd_ready 0
`), "lvsd_ready", "lvsd_reconcile_errors_total", "lvsd_backend_weight"); err != nil {
		t.Fatalf("before the first pass: %v", err)
	}

	e.reconcile(a)
	svc := ipvs.ServiceKey{Protocol: ipvs.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	rs2 := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 80}
	e.ipvs.SetConns(svc, rs2, 2, 1)
	e.ipvs.SetStats(svc, rs2, ipvs.Stats{Connections: 9, PacketsIn: 120, PacketsOut: 0, BytesIn: 6400})
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11, weight: 3}\n")
	e.reload(a)
	e.now = e.now.Add(time.Second)
	e.reconcile(a)
	e.now = e.now.Add(7 * time.Second)

	want := `
# HELP lvsd_backend_bytes_total Bytes IPVS forwarded for the backend since it was added, by direction as for lvsd_backend_packets_total.
# TYPE lvsd_backend_bytes_total counter
lvsd_backend_bytes_total{backend="10.0.0.11:80",direction="in",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
lvsd_backend_bytes_total{backend="10.0.0.11:80",direction="out",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
lvsd_backend_bytes_total{backend="10.0.0.12:80",direction="in",ipvs_service="tcp:10.0.0.50:80",service="web"} 6400
lvsd_backend_bytes_total{backend="10.0.0.12:80",direction="out",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
# HELP lvsd_backend_configured_weight The backend's weight in the service file. Absent when it is no longer configured (draining).
# TYPE lvsd_backend_configured_weight gauge
lvsd_backend_configured_weight{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 3
# HELP lvsd_backend_connections IPVS connection entries of the backend now, by state (active: established TCP; inactive: everything else, UDP included).
# TYPE lvsd_backend_connections gauge
lvsd_backend_connections{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web",state="active"} 0
lvsd_backend_connections{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web",state="inactive"} 0
lvsd_backend_connections{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web",state="active"} 2
lvsd_backend_connections{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web",state="inactive"} 1
# HELP lvsd_backend_connections_total Connections IPVS scheduled to the backend since it was added.
# TYPE lvsd_backend_connections_total counter
lvsd_backend_connections_total{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
lvsd_backend_connections_total{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 9
# HELP lvsd_backend_draining_seconds How long a removed backend has been draining (weight 0, waiting for its connections to end). Absent when it is not draining.
# TYPE lvsd_backend_draining_seconds gauge
lvsd_backend_draining_seconds{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 7
# HELP lvsd_backend_packets_total Packets IPVS forwarded for the backend since it was added; direction in is client to server, out is the replies (0 for DR and tunnel, which bypass the director).
# TYPE lvsd_backend_packets_total counter
lvsd_backend_packets_total{backend="10.0.0.11:80",direction="in",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
lvsd_backend_packets_total{backend="10.0.0.11:80",direction="out",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
lvsd_backend_packets_total{backend="10.0.0.12:80",direction="in",ipvs_service="tcp:10.0.0.50:80",service="web"} 120
lvsd_backend_packets_total{backend="10.0.0.12:80",direction="out",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
# HELP lvsd_backend_weight The backend's weight in the kernel now (the effective weight; 0 while it drains). Absent when it is not in the kernel.
# TYPE lvsd_backend_weight gauge
lvsd_backend_weight{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 3
lvsd_backend_weight{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 0
# HELP lvsd_build_info Always 1; the labels say which lvsd runs.
# TYPE lvsd_build_info gauge
lvsd_build_info{goversion="GOVERSION",version="1.2.3"} 1
# HELP lvsd_connection_resets_total Destinations whose connections lvsd dropped: unhealthy where connections do not persist (persistence_on_unhealthy), or every destination of a service at failover with drain_on_failover false.
# TYPE lvsd_connection_resets_total counter
lvsd_connection_resets_total 0
# HELP lvsd_last_reconcile_success 1 if the last reconcile pass succeeded, else 0.
# TYPE lvsd_last_reconcile_success gauge
lvsd_last_reconcile_success 1
# HELP lvsd_last_reconcile_timestamp_seconds When the last reconcile pass finished, as a Unix time.
# TYPE lvsd_last_reconcile_timestamp_seconds gauge
lvsd_last_reconcile_timestamp_seconds 1001
# HELP lvsd_ready 1 once the first reconcile pass has finished.
# TYPE lvsd_ready gauge
lvsd_ready 1
# HELP lvsd_reconcile_duration_seconds Time spent in reconcile passes (read the kernel, plan, apply); the count is the number of passes.
# TYPE lvsd_reconcile_duration_seconds summary
lvsd_reconcile_duration_seconds_sum 0
lvsd_reconcile_duration_seconds_count 2
# HELP lvsd_reconcile_errors_total Reconcile passes that ended with an error (kernel read or some change failed); they are retried.
# TYPE lvsd_reconcile_errors_total counter
lvsd_reconcile_errors_total 0
# HELP lvsd_service_eligible_backends Backends taking new connections now (kernel weight above 0); 0 means the service refuses new clients.
# TYPE lvsd_service_eligible_backends gauge
lvsd_service_eligible_backends{ipvs_service="tcp:10.0.0.50:80",service="web"} 1
# HELP lvsd_service_in_kernel 1 if the IPVS service is in the kernel now.
# TYPE lvsd_service_in_kernel gauge
lvsd_service_in_kernel{ipvs_service="tcp:10.0.0.50:80",service="web"} 1
# HELP lvsd_service_info Always 1; the labels describe the IPVS service lvsd wants.
# TYPE lvsd_service_info gauge
lvsd_service_info{flags="mh-fallback,mh-port",ipvs_service="tcp:10.0.0.50:80",scheduler="mh",service="web",vip="10.0.0.50"} 1
# HELP lvsd_service_vip_held 1 if this node holds the service's VIP on its interface now.
# TYPE lvsd_service_vip_held gauge
lvsd_service_vip_held{ipvs_service="tcp:10.0.0.50:80",service="web"} 1
`
	want = strings.ReplaceAll(want, "GOVERSION", runtime.Version())
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	// promlint: base units, _total on counters, no camelCase, …
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestMetricsCountFailedPasses: a pass that fails counts as an error and
// flips lvsd_last_reconcile_success; the next good pass flips it back.
func TestMetricsCountFailedPasses(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	c := NewCollector(a, "dev")
	e.reconcile(a)
	a.opts.Kernel.IPVS = brokenIPVS{e.ipvs}
	e.resync(a)
	a.opts.Kernel.IPVS = e.ipvs
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
	if st, _ := a.Reconciles(); st.Passes != 3 || st.Failed != 1 {
		t.Errorf("Reconciles() = %+v, want 3 passes, 1 failed", st)
	}
}

// brokenIPVS fails every read, as a kernel without IPVS would.
type brokenIPVS struct{ ipvs.Interface }

func (brokenIPVS) Services(context.Context) ([]ipvs.Service, error) {
	return nil, errors.New("netlink: boom")
}

// TestStalled: the watchdog's view of the loop.
func TestStalled(t *testing.T) {
	e := newEnv(t)
	a := e.agent()
	if a.Stalled(e.now.Add(time.Hour)) {
		t.Error("stalled before the first pass; a slow start is not a hang")
	}
	e.reconcile(a)
	if a.Stalled(e.now.Add(DefaultResync)) {
		t.Error("stalled one resync period after a pass")
	}
	if !a.Stalled(e.now.Add(2*DefaultResync + DefaultCheck + time.Second)) {
		t.Error("not stalled after two resync periods without a pass")
	}
}

// TestMetricsHealth: checked backends export lvsd_backend_healthy, and an
// unhealthy one (weight 0) is not counted as eligible; lvsd status shows
// why it fails.
func TestMetricsHealth(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nhealth: {checks: [{type: tcp}]}\n"+
		"backends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n  - {address: 10.0.0.13, health: {checks: [{type: tcp}]}}\n")
	a := e.agent()
	a.opts.Health = &fakeHealth{states: map[string]health.State{ // fakeHealth: eligibility_test.go
		"web/10.0.0.11": {Known: true, Healthy: true, Weight: -1},
		"web/10.0.0.12": {Known: true, Healthy: false, Weight: -1, LastError: "tcp: connection refused"},
	}}
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
