package agent

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/health"
)

// deltaHealth is a checker that reports what changed, as health.Monitor
// does: set records a state and marks it.
type deltaHealth struct {
	fakeHealth
	dirty map[string]bool
}

func newDeltaHealth(states map[string]health.State) *deltaHealth {
	d := &deltaHealth{fakeHealth: fakeHealth{states: states}, dirty: map[string]bool{}}
	for k := range states {
		d.dirty[k] = true
	}
	return d
}

func (d *deltaHealth) set(key string, st health.State) { d.states[key] = st; d.dirty[key] = true }

func (d *deltaHealth) remove(key string) { delete(d.states, key); d.dirty[key] = true }

func (d *deltaHealth) Changes() (map[string]health.State, []string, bool) {
	out, removed := map[string]health.State{}, []string(nil)
	for k := range d.dirty {
		if st, ok := d.states[k]; ok {
			out[k] = st
		} else {
			removed = append(removed, k)
		}
	}
	clear(d.dirty)
	return out, removed, false
}

// checkedServices writes n services of 10 backends with health checks and
// returns every target's state, healthy.
func checkedServices(e *testEnv, n int) map[string]health.State {
	states := map[string]health.State{}
	for i := range n {
		var sb strings.Builder
		fmt.Fprintf(&sb, "service: s%05d\nvip: 10.0.%d.1\nports: [%d]\nhealth: {checks: [{type: tcp}]}\nbackends:\n", i, i/1000, 1000+i%1000)
		for j := range 10 {
			fmt.Fprintf(&sb, "  - {address: 10.1.0.%d}\n", j+1)
			states[fmt.Sprintf("s%05d/10.1.0.%d", i, j+1)] = health.State{Known: true, Healthy: true, Weight: health.NoWeight}
		}
		e.service(fmt.Sprintf("s%05d", i), sb.String())
	}
	return states
}

// Taking in only what the checker says changed keeps the agent's health
// and desired state what taking in every state gives, whatever changes.
func TestHealthChangesAreSnapshots(t *testing.T) {
	e := newEnv(t)
	states := checkedServices(e, 20)
	checker := newDeltaHealth(states)
	a := e.agentWith(Options{Health: checker})
	e.reconcile(a)
	keys := make([]string, 0, len(states))
	for k := range states {
		keys = append(keys, k)
	}
	if len(a.health) != len(states) {
		t.Fatalf("the agent took in %d states of %d: keys are not the targets'", len(a.health), len(states))
	}
	rng := rand.New(rand.NewPCG(9, 27))
	moved := 0 // rounds that changed the desired state
	prevDesired := a.desired
	for round := range 300 {
		for range 1 + rng.IntN(4) {
			k := keys[rng.IntN(len(keys))]
			if rng.IntN(10) == 0 {
				checker.remove(k)
				continue
			}
			checker.set(k, health.State{Known: true, Healthy: rng.IntN(2) == 0, Weight: rng.IntN(3) - 1})
		}
		a.refreshHealth()
		want := map[string]planner.BackendHealth{}
		for k, st := range checker.states {
			want[k] = planner.BackendHealth{Healthy: st.Healthy, Weight: st.Weight}
		}
		if !maps.Equal(a.health, want) {
			t.Fatalf("round %d: health %v, want %v", round, a.health, want)
		}
		got := a.desired
		a.applyHealth(nil)
		if !reflect.DeepEqual(got.Services, a.desired.Services) {
			t.Fatalf("round %d: desired after the changes differs from deciding everything", round)
		}
		if !reflect.DeepEqual(got.Services, prevDesired.Services) {
			moved++
		}
		prevDesired = got
		e.reconcile(a)
	}
	if moved < 100 {
		t.Errorf("%d of 300 rounds changed the desired state", moved)
	}
}

// BenchmarkHealthChange is one backend's health changing among n services
// of 10 checked backends each: what the agent does from the checker's
// hint to the reconciled kernel (the agent loop's reconcile).
func BenchmarkHealthChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			e := newEnv(b)
			checker := newDeltaHealth(checkedServices(e, n))
			a := e.agentWith(Options{Health: checker})
			a.reconcile(context.Background())
			flapping := fmt.Sprintf("s%05d/10.1.0.3", n/2)
			if _, ok := a.health[flapping]; !ok {
				b.Fatalf("the agent has no health for %s", flapping)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				checker.set(flapping, health.State{Known: true, Healthy: i%2 == 1, Weight: health.NoWeight})
				a.reconcile(context.Background()) // takes the health in, as after the checker's hint
				e.ipvs.Ops()
			}
		})
	}
}
