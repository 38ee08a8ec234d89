package planner

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs/l4"
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
			want := map[string]uint16{"10.0.0.11": 0, "10.0.0.12": 5, "127.0.0.1": 1}[dst.Addr().String()]
			if dst.Weight != want {
				t.Errorf("%s %s: weight %d, want %d", vs.ServiceKey, dst.Key(), dst.Weight, want)
			}
		}
	}
}

// A decision names its backends by position in the service it was decided
// for: looked up by key, listed in the configuration's order without the
// administratively out, and compared by key across a reload that made the
// service anew.
func TestEligibilityByPosition(t *testing.T) {
	const yaml = "service: web\nvip: 10.0.0.50\nports: [80]\nhealth: {rise: 1, fall: 1, checks: [{type: tcp, port: 80}]}\n" +
		"backends: [{address: 10.0.0.11}, {address: 10.0.0.12}, {address: 10.0.0.13, weight: 0}, {address: 10.0.0.9}]\n"
	s := loadOne(t, yaml).Services[0]
	health := map[string]BackendHealth{"web/10.0.0.12": {Healthy: false, Weight: -1}}
	e := ServiceWeights(s, health, nil, map[string]Weights{})
	want := []Decided{{"web/10.0.0.9", true, true}, {"web/10.0.0.11", true, true}, {"web/10.0.0.12", false, false}}
	if got := e.Decided(); !slices.Equal(got, want) {
		t.Errorf("decided %v, want %v", got, want)
	}
	for key, eligible := range map[string]bool{"web/10.0.0.9": true, "web/10.0.0.12": false, "web/10.0.0.13": false, "web/10.0.0.99": false} {
		if e.Eligible(key) != eligible {
			t.Errorf("Eligible(%s) = %v, want %v", key, !eligible, eligible)
		}
	}
	if d := e.diverted(); len(d) != 1 || !d["web/10.0.0.12"] {
		t.Errorf("diverted %v, want web/10.0.0.12 alone", d)
	}

	reloaded := loadOne(t, yaml).Services[0] // the same backends, another service value
	for _, c := range []struct {
		name   string
		health map[string]BackendHealth
		same   bool
	}{
		{"same health", health, true},
		{"one more unhealthy", map[string]BackendHealth{"web/10.0.0.12": {Weight: -1}, "web/10.0.0.9": {Weight: -1}}, false},
	} {
		for _, of := range []*config.Service{s, reloaded} {
			o := ServiceWeights(of, c.health, nil, map[string]Weights{})
			if got := e.SameEligible(o); got != c.same {
				t.Errorf("%s, reloaded %v: SameEligible %v, want %v", c.name, of != s, got, c.same)
			}
		}
	}
}

// A service of many backends finds each one's decision by its address and
// port, with and without a port of its own, IPv6 too.
func TestEligibilityOfManyBackends(t *testing.T) {
	yaml := "service: big\nvip: 2001:db8::50\nports: [80]\nforwarding: nat\nhealth: {rise: 1, fall: 1, checks: [{type: tcp, port: 80}]}\nbackends:\n"
	var keys []string
	for i := range 20 {
		if i%2 == 0 {
			yaml += fmt.Sprintf("  - {address: 2001:db8::%x}\n", i+1)
			keys = append(keys, fmt.Sprintf("big/2001:db8::%x", i+1))
		} else {
			yaml += fmt.Sprintf("  - {address: 2001:db8::%x, port: 8080}\n", i+1)
			keys = append(keys, fmt.Sprintf("big/[2001:db8::%x]:8080", i+1))
		}
	}
	s := loadOne(t, yaml).Services[0]
	health := map[string]BackendHealth{}
	for i, k := range keys {
		health[k] = BackendHealth{Healthy: i%3 != 0, Weight: -1}
	}
	e := ServiceWeights(s, health, nil, map[string]Weights{})
	for i, k := range keys {
		if got, want := e.Eligible(k), i%3 != 0; got != want {
			t.Errorf("Eligible(%s) = %v, want %v", k, got, want)
		}
	}
	for _, k := range []string{"big/2001:db8::99", "big/[2001:db8::1]:8080", "other/2001:db8::1", "big/not an address"} {
		if e.Eligible(k) {
			t.Errorf("Eligible(%s) for no backend of the service", k)
		}
	}
}

// A destination names its configured backend, the sorry server its own
// key, and one of lvsd's own services nothing a configured service could
// also name.
func TestDestinationBackend(t *testing.T) {
	web := &config.Service{Name: "web", VIP: netip.MustParseAddr("10.0.0.50"), Ports: []l4.PortRange{{From: 80, To: 80}},
		Backends:    []config.Backend{{Addr: netip.MustParseAddr("10.0.0.11"), Weight: 1}, {Addr: netip.MustParseAddr("10.0.0.12"), Port: 8080, Weight: 1}},
		SorryServer: netip.MustParseAddrPort("10.0.0.99:80")}
	dsts, sorry := destinations(web, 80)
	vs := &VirtualService{Name: web.Name, Destinations: dsts, Sorry: sorry}
	for i, want := range []string{"web/10.0.0.11", "web/10.0.0.12:8080"} {
		if got := vs.Backend(dsts[i]); got != want {
			t.Errorf("destination %d: %q, want %q", i, got, want)
		}
	}
	if got := vs.Backend(*sorry); got != SorryKey("web") {
		t.Errorf("sorry server: %q, want %q", got, SorryKey("web"))
	}
	pusher := pusherService(config.ConnSync{Port: 8848})
	if got := pusher.Backend(pusher.Destinations[0]); got != "" {
		t.Errorf("the pusher's destination: %q, want none", got)
	}
}
