package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/health"
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

// countingHealth is a fakeHealth that counts the hand-overs.
type countingHealth struct {
	fakeHealth
	sets    int
	updated []map[string]bool
}

func (c *countingHealth) Set(t []health.Target) { c.sets++; c.fakeHealth.Set(t) }

func (c *countingHealth) Update(groups map[string]bool, t []health.Target) {
	c.updated = append(c.updated, groups)
	c.fakeHealth.Update(groups, t)
}

// A SIGHUP that finds services edited, removed and added hands the
// checker the targets of those services only, and it ends with every
// target of the configuration: a full Set made and compared 100,000
// targets for one weight edited.
func TestSignalHandsOverChangedTargets(t *testing.T) {
	e := newEnv(t)
	body := func(name string, weight int) string {
		return fmt.Sprintf("service: %s\nvip: 10.0.0.50\nports: [%d]\nhealth: {checks: [{type: tcp}]}\nbackends:\n"+
			"  - {address: 10.0.0.11, weight: %d}\n  - {address: 10.0.0.12}\n", name, 80+len(name), weight)
	}
	for _, name := range []string{"a", "bb", "ccc"} {
		e.service(name, body(name, 1))
	}
	checker := &countingHealth{}
	a := e.agentWith(Options{Health: checker})
	a.reconcile(context.Background())
	if checker.sets != 1 {
		t.Fatalf("%d Sets at the start, want 1", checker.sets)
	}
	e.service("a", body("a", 5))
	if err := os.Remove(filepath.Join(e.dir, "services.d", "bb.yaml")); err != nil {
		t.Fatal(err)
	}
	e.service("dddd", body("dddd", 1))
	if _, _, err := a.reload("signal", nil); err != nil {
		t.Fatal(err)
	}
	if checker.sets != 1 || len(checker.updated) != 1 {
		t.Fatalf("after the SIGHUP: %d Sets, updates %v; want no Set and one Update", checker.sets, checker.updated)
	}
	if got, want := slices.Sorted(maps.Keys(checker.updated[0])), []string{"a", "bb", "dddd"}; !slices.Equal(got, want) {
		t.Errorf("updated %v, want %v", got, want)
	}
	keys := func(ts []health.Target) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Key)
		}
		slices.Sort(out)
		return out
	}
	if got, want := keys(checker.targets), keys(HealthTargets(a.cfg.Services)); !slices.Equal(got, want) {
		t.Errorf("the checker ends with %v, want %v", got, want)
	}
}
