package config

import (
	"strings"
	"testing"
)

// health_checks.max_in_flight is optional (an agent file without it keeps
// loading), a positive count, and a director's only.
func TestHealthMaxInFlight(t *testing.T) {
	for _, c := range []struct {
		name, block string
		want        int
		err         string
	}{
		{"absent: the default", "", 0, ""},
		{"a count", "health_checks: {max_in_flight: 256}\n", 256, ""},
		{"the largest", "health_checks: {max_in_flight: 1000000}\n", 1000000, ""},
		{"zero", "health_checks: {max_in_flight: 0}\n", 0, "lvsd.yaml:3:32:"},
		{"too many", "health_checks: {max_in_flight: 1000001}\n", 0, "lvsd.yaml:3:32:"},
		{"not a number", "health_checks: {max_in_flight: lots}\n", 0, "lvsd.yaml:3:32:"},
		{"unknown key", "health_checks: {max_inflight: 10}\n", 0, "lvsd.yaml:3:17:"},
		{"a real server", "role: realserver\nhealth_checks: {max_in_flight: 10}\n", 0,
			"lvsd.yaml:4:32: health_checks is for role director"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "lvsd.yaml", "node: d1\ninterface: eth0\n"+c.block)
			a, err := LoadAgent(p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.HealthMaxInFlight != c.want {
				t.Errorf("HealthMaxInFlight %d, want %d", a.HealthMaxInFlight, c.want)
			}
		})
	}
}
