package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
)

// The backends that share a health block share one slice of checks, so
// that the checker compares and keeps them once per service; a backend
// with its own block has its own.
func TestHealthTargetsShareChecks(t *testing.T) {
	svc := &config.Health{Rise: 2, Fall: 3, Checks: []config.Check{{Type: "tcp", Interval: time.Second, Timeout: time.Second}}}
	own := &config.Health{Rise: 1, Fall: 1, Checks: []config.Check{{Type: "tcp", Port: 81, Interval: time.Second, Timeout: time.Second}}}
	addr := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	services := []*config.Service{{Name: "web", Health: svc, Backends: []config.Backend{
		{Addr: addr("10.0.0.1"), Port: 80, Health: svc},
		{Addr: addr("10.0.0.2"), Port: 80, Health: svc},
		{Addr: addr("10.0.0.3"), Port: 80, Health: own},
		{Addr: addr("10.0.0.4"), Port: 80},
	}}}
	ts := HealthTargets(services)
	if len(ts) != 3 {
		t.Fatalf("%d targets, want 3 (the unchecked backend has none)", len(ts))
	}
	if &ts[0].Checks[0] != &ts[1].Checks[0] {
		t.Error("backends of one health block have checks of their own")
	}
	if &ts[0].Checks[0] == &ts[2].Checks[0] || ts[2].Checks[0].Port != 81 || ts[2].Rise != 1 {
		t.Errorf("the backend with its own health block: %+v", ts[2])
	}
	for _, tg := range ts {
		if tg.Group != "web" || tg.Port != 80 {
			t.Errorf("target %s: group %q port %d, want web and 80", tg.Key, tg.Group, tg.Port)
		}
	}
}
