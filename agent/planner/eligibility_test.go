package planner

import (
	"slices"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
)

// Health reaches each destination by its backend's key, whatever the order
// or number of the destinations: reversed, the weights follow.
func TestWithHealthKeyedByBackend(t *testing.T) {
	const yaml = "service: web\nvip: 10.0.0.50\nports: [80, 443]\nhealth: {rise: 1, fall: 1, checks: [{type: tcp, port: 80}]}\n" +
		"backends: [{address: 10.0.0.11, weight: 3}, {address: 10.0.0.12, weight: 5}]\n"
	cfg := loadOne(t, yaml)
	d := cfg.Desired
	for i := range d.Services {
		slices.Reverse(d.Services[i].Destinations)
	}
	d.Services = append(d.Services, pusherService(config.ConnSync{Port: 8848})) // a service without backends
	out, _ := WithHealth(d, cfg.Services, map[string]BackendHealth{"web/10.0.0.11": {Healthy: false, Weight: -1}, "web/10.0.0.12": {Healthy: true, Weight: -1}}, nil)
	for _, vs := range out.Services {
		for _, dst := range vs.Destinations {
			want := map[string]int{"10.0.0.11": 0, "10.0.0.12": 5, "127.0.0.1": 1}[dst.Addr().String()]
			if dst.Weight != want {
				t.Errorf("%s %s: weight %d, want %d", vs.ServiceKey, dst.Key(), dst.Weight, want)
			}
		}
	}
}
