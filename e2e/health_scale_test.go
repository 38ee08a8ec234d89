//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// healthScaleServices is how many checked services TestHealthChecksBeyondTheHost
// configures besides web: E2E_HEALTH_SCALE_SERVICES, by default 1,000
// (2,000 backends checked every 2 s: 1,000 checks a second).
func healthScaleServices(t *testing.T) int { return envCount(t, "E2E_HEALTH_SCALE_SERVICES", 1000, 1) }

// TestHealthChecksBeyondTheHost: a director whose checks ask more than it
// may run at once (health_checks.max_in_flight: 4 against 1,000 checks a
// second, real TCP connects to two real servers) starts its checks once its
// first pass has reconciled, delays the rounds beyond the bound and says
// so, fails none of them for it (every backend answers: no verdict
// unhealthy), keeps forwarding, and keeps running.
func TestHealthChecksBeyondTheHost(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(8))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	n := healthScaleServices(t)
	check := "health: {interval: 2s, timeout: 2s, rise: 1, fall: 1, checks: [{type: tcp, port: 80}]}\n"
	backends := backendsYAML([]*topo.Host{rs1, rs2})
	services := map[string]string{"web": fmt.Sprintf("service: web\nvip: %s\nports: [80]\n%sbackends:\n%s", vip, check, backends)}
	var bulk strings.Builder
	for i := range n {
		fmt.Fprintf(&bulk, "---\nservice: s%05d\nvip: %s\nports: [%d]\n%sbackends:\n%s", i, vip, 1000+i, check, backends)
		if (i+1)%500 == 0 || i == n-1 { // lvsd reads files up to 1 MiB
			services[fmt.Sprintf("bulk%05d", i)] = bulk.String()
			bulk.Reset()
		}
	}
	d := newDirector(t, tp.Director(1), services)
	d.logAtInfo()
	agentFile := filepath.Join(d.dir, "lvsd.yaml")
	b, err := os.ReadFile(agentFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, agentFile, string(b)+"health_checks: {max_in_flight: 4}\n")
	start := time.Now()
	d.start()

	reconciled := d.waitLog(0, 5*time.Minute, "msg=reconciled")
	t.Logf("first pass of %d checked services reconciled after %v", n+1, time.Since(start).Round(100*time.Millisecond))
	started := d.waitLog(0, time.Minute, `msg="health checks started"`, "max_in_flight=4", fmt.Sprintf("targets=%d", 2*(n+1)))
	if log := d.log(); strings.Index(log, started) < strings.Index(log, reconciled) {
		t.Errorf("the checks started before the first pass reconciled:\n%s", log)
	}
	delayed := d.waitLog(0, 2*time.Minute, "event=health_delayed", "max_in_flight=4")
	t.Logf("lvsd: %s", delayed)

	// Half a minute of checks beyond the bound: at least every backend's
	// first round, each spread over its 2 s.
	off := d.logSize()
	time.Sleep(30 * time.Second)
	d.checkAlive()
	got := newConnectionsGoTo(t, tp, vip, 16)
	if got["error"] > 0 || got["rs1"] == 0 || got["rs2"] == 0 {
		t.Errorf("new connections to the VIP while the checks are delayed: %v, want both real servers and no error", got)
	}
	for _, line := range strings.Split(d.log(), "\n") {
		if strings.Contains(line, `msg="target unhealthy"`) || strings.Contains(line, "level=ERROR") {
			t.Errorf("a delayed check was counted as a failure, or lvsd erred: %s", line)
		}
	}
	if since := d.logSince(off); strings.Count(since, "event=health_delayed") > 1 {
		t.Errorf("delays logged more than once a minute:\n%s", since)
	}
}
