package config

import (
	"strings"
	"testing"
)

func TestMetricsListen(t *testing.T) {
	for _, c := range []struct{ block, want, err string }{
		{"", DefaultMetricsListen, ""},
		{"metrics: {listen: off}\n", "", ""},
		{"metrics: {listen: \":9610\"}\n", ":9610", ""},
		{"metrics: {listen: \"[::1]:9610\"}\n", "[::1]:9610", ""},
		{"metrics: {listen: \"localhost:9610\"}\n", "", `lvsd.yaml:3:19: metrics listen "localhost:9610" is not ":port", "IP:port" or "off"`},
		{"metrics: {listen: \"10.0.0.1\"}\n", "", `metrics listen "10.0.0.1" is not`},
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
		if a.MetricsListen != c.want {
			t.Errorf("%q: MetricsListen %q, want %q", c.block, a.MetricsListen, c.want)
		}
	}
}
