package config

import (
	"strings"
	"testing"
)

func TestMetricsListen(t *testing.T) {
	for _, c := range []struct {
		block, want, err string
		perBackend       bool
	}{
		{"", DefaultMetricsListen, "", true},
		{"metrics: {listen: off}\n", "", "", true},
		{"metrics: {listen: \":9610\"}\n", ":9610", "", true},
		{"metrics: {listen: \"[::1]:9610\"}\n", "[::1]:9610", "", true},
		{"metrics: {listen: \"localhost:9610\"}\n", "", `lvsd.yaml:3:19: metrics listen "localhost:9610" is not ":port", "IP:port" or "off"`, true},
		{"metrics: {listen: \"10.0.0.1\"}\n", "", `metrics listen "10.0.0.1" is not`, true},
		{"metrics: {per_backend: false}\n", DefaultMetricsListen, "", false},
		{"metrics: {per_backend: true}\n", DefaultMetricsListen, "", true},
		{"metrics: {per_backend: no}\n", "", `lvsd.yaml:3:24:`, false},
		{"role: realserver\nmetrics: {per_backend: false}\n", "", `lvsd.yaml:4:24: metrics.per_backend is for role director`, false},
	} {
		dir := t.TempDir()
		p := writeFile(t, dir, "lvsd.yaml", "node: d1\ninterface: eth0\n"+c.block)
		a, err := LoadAgent(p)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.block, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.block, err)
			continue
		}
		if a.MetricsListen != c.want || a.MetricsPerBackend != c.perBackend {
			t.Errorf("%q: MetricsListen %q, MetricsPerBackend %v; want %q, %v", c.block, a.MetricsListen, a.MetricsPerBackend,
				c.want, c.perBackend)
		}
	}
}
