//go:build e2e

package systemd

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape returns lvsd.service's /metrics after promtool check metrics has
// linted it (names, units and types as Prometheus expects them); promtool
// is the host's, which `make e2e` installs (examples/prometheus/check).
func scrape(t *testing.T) string {
	t.Helper()
	metrics := sh(t, "curl", "-fsS", "http://127.0.0.1:9610/metrics")
	lint := exec.Command("promtool", "check", "metrics")
	lint.Stdin = strings.NewReader(metrics)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on lvsd's /metrics: %v\n%s", err, out)
	}
	return metrics
}

// checkReloadMetric: lvsd_config_last_reload_successful is want.
func checkReloadMetric(t *testing.T, want float64) {
	t.Helper()
	// lvsd reads an edited file by itself once it stayed the same for a
	// check interval (2 s): a rejected `systemctl reload` never signals it.
	eventually(t, 10*time.Second, "lvsd_config_last_reload_successful", func() error {
		if got := metricValue(scrape(t), "lvsd_config_last_reload_successful"); got != want {
			return fmt.Errorf("lvsd_config_last_reload_successful = %v, want %v", got, want)
		}
		return nil
	})
}

// checkKernelCounters: lvsd's counters of backend (connections, packets
// and bytes in; 64-bit, read through lvsd's own generic netlink) are the
// kernel's as ipvsadm --stats --exact shows them just before and just
// after the scrape, and traffic has moved them.
func checkKernelCounters(t *testing.T, backend string) {
	t.Helper()
	before := ipvsadmStats(t, backend)
	metrics := scrape(t)
	after := ipvsadmStats(t, backend)
	l := fmt.Sprintf(`backend=%q,`, backend)
	svc := `ipvs_service="tcp:10.0.0.50:80",service="web"`
	for i, series := range []string{
		"lvsd_backend_connections_total{" + l + svc + "}",
		"lvsd_backend_packets_total{" + l + `direction="in",` + svc + "}",
		"",
		"lvsd_backend_bytes_total{" + l + `direction="in",` + svc + "}",
	} {
		if series == "" {
			continue // OutPkts: 0 under DR
		}
		got := metricValue(metrics, series)
		t.Logf("%s %v (ipvsadm: %v..%v)", series, got, before[i], after[i])
		if got <= 0 || got < before[i] || got > after[i] {
			t.Errorf("%s = %v; ipvsadm --stats --exact says %v before the scrape, %v after", series, got, before[i], after[i])
		}
	}
	for _, want := range []string{
		"lvsd_backend_connection_entries{" + l + svc + `,state="inactive"}`,
		`lvsd_reconcile_duration_seconds_bucket{le="+Inf"}`,
	} {
		if metricValue(metrics, want) < 0 {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// ipvsadmStats reads Conns, InPkts, OutPkts, InBytes and OutBytes of
// backend from ipvsadm -Ln --stats --exact.
func ipvsadmStats(t *testing.T, backend string) []float64 {
	t.Helper()
	table := sh(t, "ipvsadm", "-Ln", "--stats", "--exact")
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) != 7 || f[0] != "->" || f[1] != backend {
			continue
		}
		var out []float64
		for _, s := range f[2:] {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("ipvsadm --stats: %q: %v", line, err)
			}
			out = append(out, v)
		}
		return out
	}
	t.Fatalf("ipvsadm -Ln --stats --exact has no line for %s:\n%s", backend, table)
	return nil
}
