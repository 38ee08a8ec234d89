package agent

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/ipvs"
)

// After a reload of a few files, the desired state with health applied is
// spliced from the previous one (applyHealthSince): whatever the edits, it
// is what deciding every service again gives — with backends unhealthy,
// weights reported, sorry servers, services that come, go and move.
func TestHealthAfterReloadIsDecidingEverything(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(7, 16))
	body := func(i int) string {
		sb := new(strings.Builder)
		for j := range 1 + rng.IntN(2) {
			fmt.Fprintf(sb, "---\nservice: s%d-%d\nvip: 10.0.0.%d\nports: [%d]\n", i, j, 50+rng.IntN(8), 1000+10*i+j+rng.IntN(2)*5)
			if rng.IntN(3) == 0 {
				sb.WriteString("sorry_server: 10.0.9.9\n")
			}
			if rng.IntN(2) == 0 {
				sb.WriteString("health: {weight_header: true, checks: [{type: http}]}\n")
			}
			sb.WriteString("backends:\n")
			for k := range 1 + rng.IntN(3) {
				fmt.Fprintf(sb, "  - {address: 10.1.0.%d, weight: %d}\n", k+1, rng.IntN(4))
			}
		}
		return sb.String()
	}
	for i := range 12 {
		e.service(fmt.Sprintf("f%02d", i), body(i))
	}
	a := e.agent()
	e.reconcile(a)
	for round := range 300 {
		var changed []string
		for range 1 + rng.IntN(2) {
			i := rng.IntN(14)
			changed = append(changed, e.rewriteOrRemove(rng, fmt.Sprintf("f%02d", i), func() string { return body(i) }))
		}
		// Health as the checker reports it, for any backend of any service.
		a.health = map[string]planner.BackendHealth{}
		for _, s := range a.cfg.Services {
			for _, b := range s.Backends {
				if rng.IntN(3) == 0 {
					a.health[planner.HealthKey(s.Name, b)] = planner.BackendHealth{Healthy: rng.IntN(2) == 0, Weight: rng.IntN(3) - 1}
				}
			}
		}
		a.applyHealth(nil) // the health above is in force before the edit
		a.reload("file change", changed)
		if c := planner.CountEligible(a.desired); !a.eligibleVIPs.Equal(c) || !maps.Equal(a.eligibleVIPs.VIPs(), planner.EligibleVIPs(a.desired)) {
			t.Fatalf("round %d: eligible VIPs %+v, counted again %+v", round, a.eligibleVIPs, c)
		}
		got, gotEligibility := a.desired, maps.Collect(a.eligibility.All())
		a.applyHealth(nil)
		if !reflect.DeepEqual(got.Services, a.desired.Services) {
			t.Fatalf("round %d, %q changed: spliced\n%v\ndeciding everything\n%v", round, changed, got.Services, a.desired.Services)
		}
		if decided := maps.Collect(a.eligibility.All()); !maps.EqualFunc(gotEligibility, decided, func(x, y planner.Eligibility) bool { return reflect.DeepEqual(x, y) }) {
			t.Fatalf("round %d: eligibility spliced %v, decided %v", round, gotEligibility, decided)
		}
		names := map[string]bool{fmt.Sprintf("s%d-0", rng.IntN(14)): true, fmt.Sprintf("s%d-1", rng.IntN(14)): true}
		keys := a.cfg.serviceKeys(names)
		slices.SortFunc(keys, ipvs.ServiceKey.Compare)
		if want := planner.ServicesOf(a.cfg.Desired, names); !slices.Equal(keys, want) {
			t.Fatalf("round %d: the pieces of %v have %v, the desired state %v", round, names, keys, want)
		}
		// A health change of those services alone.
		for _, s := range a.cfg.named(names) {
			for _, b := range s.Backends {
				a.health[planner.HealthKey(s.Name, b)] = planner.BackendHealth{Healthy: rng.IntN(2) == 0, Weight: rng.IntN(3) - 1}
			}
		}
		a.applyHealth(names)
		if c := planner.CountEligible(a.desired); !a.eligibleVIPs.Equal(c) || !maps.Equal(a.eligibleVIPs.VIPs(), planner.EligibleVIPs(a.desired)) {
			t.Fatalf("round %d: after a health change, eligible VIPs %+v, counted again %+v", round, a.eligibleVIPs, c)
		}
		e.reconcile(a)
	}
}

// After a reload of a few files the health checker is handed the changed
// services' targets only (Update), and ends up checking what a Set of
// every service's targets would have it check.
func TestHealthTargetsFollowReloads(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(16, 7))
	body := func(i int) string {
		var sb strings.Builder
		fmt.Fprintf(&sb, "service: s%d\nvip: 10.0.0.50\nports: [%d]\n", i, 1000+i)
		if rng.IntN(3) > 0 {
			fmt.Fprintf(&sb, "health: {rise: %d, checks: [{type: tcp}]}\n", 1+rng.IntN(3))
		}
		sb.WriteString("backends:\n")
		for k := range 1 + rng.IntN(3) {
			fmt.Fprintf(&sb, "  - {address: 10.1.0.%d}\n", 2*k+1+rng.IntN(2))
		}
		return sb.String()
	}
	for i := range 8 {
		e.service(fmt.Sprintf("f%d", i), body(i))
	}
	checker := &fakeHealth{}
	a := e.agentWith(Options{Health: checker})
	e.reconcile(a)
	key := func(t health.Target) string { return fmt.Sprintf("%s %s %d %d", t.Group, t.Key, t.Rise, len(t.Checks)) }
	for round := range 200 {
		i := rng.IntN(10)
		a.reload("file change", []string{e.rewriteOrRemove(rng, fmt.Sprintf("f%d", i), func() string { return body(i) })})
		got, want := slices.Sorted(slices.Values(mapSlice(checker.targets, key))), slices.Sorted(slices.Values(mapSlice(HealthTargets(a.cfg.Services), key)))
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: checking\n%q\nwant\n%q", round, got, want)
		}
		for _, s := range a.cfg.Services {
			for _, b := range s.Backends {
				if k := planner.HealthKey(s.Name, b); a.cfg.HasChecks(k) != (b.Health != nil) {
					t.Fatalf("round %d: %s has checks: %v", round, k, a.cfg.HasChecks(k))
				}
			}
		}
	}
}

func mapSlice[T, U any](s []T, f func(T) U) []U {
	out := make([]U, len(s))
	for i, x := range s {
		out[i] = f(x)
	}
	return out
}

// rewriteOrRemove writes service file name with body(), or one time in five
// removes it, and returns its path.
func (e *testEnv) rewriteOrRemove(rng *rand.Rand, name string, body func() string) string {
	path := filepath.Join(e.dir, "services.d", name+".yaml")
	if rng.IntN(5) == 0 {
		os.Remove(path)
	} else {
		e.service(name, body())
	}
	return path
}
