package realserver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetrics: a drained real server with one VIP missing from lo and a
// failing local check, probed three times by the directors.
func TestMetrics(t *testing.T) {
	e := newEnv(t, "  vips: [10.0.0.50, 10.0.0.51]\n  weight: 7\n  health: {checks: [{address: \"127.0.0.1:80\"}]}\n")
	var refuse atomic.Bool
	e.dial = func(context.Context, string, string) (net.Conn, error) {
		if refuse.Load() {
			return nil, errors.New("connection refused")
		}
		c1, c2 := net.Pipe()
		c2.Close()
		return c1, nil
	}
	a := e.agent()
	now := time.Unix(1000, 0)
	a.opts.Now = func() time.Time { return now }
	a.reload("test")
	e.pass(a)
	h := a.HealthHandler()
	get(t, h, "/healthz")
	if err := a.setDrained(true); err != nil {
		t.Fatal(err)
	}
	get(t, h, "/healthz")
	now = now.Add(time.Minute)
	refuse.Store(true)
	a.publish([]netip.Addr{netip.MustParseAddr("10.0.0.51")}, []string{"tunl0 is not up"})
	get(t, h, "/healthz")
	want := `
# HELP lvsd_build_info Always 1; the labels say which lvsd runs.
# TYPE lvsd_build_info gauge
lvsd_build_info{goversion="GOVERSION",version="1.2.3"} 1
# HELP lvsd_config_last_reload_success_timestamp_seconds When the configuration in force was loaded, as a Unix time.
# TYPE lvsd_config_last_reload_success_timestamp_seconds gauge
lvsd_config_last_reload_success_timestamp_seconds 1000
# HELP lvsd_config_last_reload_successful 1 if the last attempt to load the configuration (start, signal or edited file) succeeded; 0: the files on disk were rejected and the previous configuration runs.
# TYPE lvsd_config_last_reload_successful gauge
lvsd_config_last_reload_successful 1
# HELP lvsd_realserver_announced_weight The weight the weight endpoint announces now (0 while drained; 503 and 0 while unhealthy: see lvsd_realserver_healthy).
# TYPE lvsd_realserver_announced_weight gauge
lvsd_realserver_announced_weight 0
# HELP lvsd_realserver_configured_weight realserver.weight in the agent file.
# TYPE lvsd_realserver_configured_weight gauge
lvsd_realserver_configured_weight 7
# HELP lvsd_realserver_drained 1 while this real server is drained (lvsd drain): its weight endpoint announces weight 0.
# TYPE lvsd_realserver_drained gauge
lvsd_realserver_drained 1
# HELP lvsd_realserver_healthy 1 if the weight endpoint answers 200: every VIP on lo, the tunnels decapsulating, the local checks passing and the TOA programs in place.
# TYPE lvsd_realserver_healthy gauge
lvsd_realserver_healthy 0
# HELP lvsd_realserver_last_probe_timestamp_seconds When a director last probed the weight endpoint, as a Unix time; absent before the first probe. Without probes lvsd drain has no effect.
# TYPE lvsd_realserver_last_probe_timestamp_seconds gauge
lvsd_realserver_last_probe_timestamp_seconds 1060
# HELP lvsd_realserver_local_check_up 1 if the local check passes now (run at the scrape).
# TYPE lvsd_realserver_local_check_up gauge
lvsd_realserver_local_check_up{check="tcp 127.0.0.1:80"} 0
# HELP lvsd_realserver_tunnel_problems What the tunnel VIPs need and is not in place (a device down, a GUE port closed); 0 when all decapsulates.
# TYPE lvsd_realserver_tunnel_problems gauge
lvsd_realserver_tunnel_problems 1
# HELP lvsd_realserver_vip_on_lo 1 if the configured VIP is on lo, 0 if it is missing.
# TYPE lvsd_realserver_vip_on_lo gauge
lvsd_realserver_vip_on_lo{vip="10.0.0.50"} 1
lvsd_realserver_vip_on_lo{vip="10.0.0.51"} 0
# HELP lvsd_realserver_weight_probes_total The weight endpoint's answers to the directors' health checks, by answer: ok (200), drained (200, weight 0), unhealthy (503).
# TYPE lvsd_realserver_weight_probes_total counter
lvsd_realserver_weight_probes_total{answer="drained"} 1
lvsd_realserver_weight_probes_total{answer="ok"} 1
lvsd_realserver_weight_probes_total{answer="unhealthy"} 1
`
	c := NewCollector(a, "1.2.3")
	if err := testutil.CollectAndCompare(c, strings.NewReader(strings.ReplaceAll(want, "GOVERSION", runtime.Version()))); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
