package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/hooks"
	"github.com/lvsd/lvsd/cluster"
)

// eventLog records events as "kind state subject".
type eventLog struct{ got []string }

func (l *eventLog) Notify(e hooks.Event) {
	subject := e.Service + "/" + e.Backend
	if e.VIP.IsValid() {
		subject = e.VIP.String()
	}
	l.got = append(l.got, fmt.Sprintf("%s %s %s", e.Kind, e.State, subject))
}

// take returns the events since the last take.
func (l *eventLog) take() []string {
	out := l.got
	l.got = nil
	return out
}

// logged is events as an eventLog records them.
func logged(events []hooks.Event) []string {
	var l eventLog
	for _, e := range events {
		l.Notify(e)
	}
	return l.got
}

func TestOwnershipEvents(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	for _, tc := range []struct {
		name        string
		before, now map[netip.Addr]bool
		want        []string
	}{
		{"first pass holds some", nil, map[netip.Addr]bool{a: true, b: false}, []string{"ownership taken 10.0.0.1"}},
		{"unchanged", map[netip.Addr]bool{a: true, b: false}, map[netip.Addr]bool{a: true, b: false}, nil},
		{"moves", map[netip.Addr]bool{a: true, b: false, c: true}, map[netip.Addr]bool{a: false, b: true, c: true},
			[]string{"ownership released 10.0.0.1", "ownership taken 10.0.0.2"}},
		{"no longer configured", map[netip.Addr]bool{a: true}, map[netip.Addr]bool{}, []string{"ownership released 10.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := logged(ownershipEvents(tc.before, tc.now)); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHealthEvents(t *testing.T) {
	up, down := planner.BackendHealth{Healthy: true, Weight: health.NoWeight}, planner.BackendHealth{Weight: health.NoWeight}
	for _, tc := range []struct {
		name        string
		before, now map[string]planner.BackendHealth
		want        []string
	}{
		{"new and healthy: as it started", nil, map[string]planner.BackendHealth{"web/10.0.0.11:80": up}, nil},
		{"new and failing", nil, map[string]planner.BackendHealth{"web/10.0.0.11:80": down}, []string{"health unhealthy web/10.0.0.11:80"}},
		{"weight only", map[string]planner.BackendHealth{"web/10.0.0.11:80": up},
			map[string]planner.BackendHealth{"web/10.0.0.11:80": {Healthy: true, Weight: 5}}, nil},
		{"both ways, in key order",
			map[string]planner.BackendHealth{"web/10.0.0.12:80": down, "api/10.0.0.11": up, "web/10.0.0.11:80": up},
			map[string]planner.BackendHealth{"web/10.0.0.12:80": up, "api/10.0.0.11": down, "web/10.0.0.11:80": up},
			[]string{"health unhealthy api/10.0.0.11", "health healthy web/10.0.0.12:80"}},
		{"removed: no event", map[string]planner.BackendHealth{"web/10.0.0.11:80": down}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := logged(healthEvents(tc.before, tc.now)); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The reconciler reports each health transition once, however often the
// checker's states are taken in.
func TestAgentReportsHealthTransitionsOnce(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nhealth: {checks: [{type: tcp}]}\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n")
	var l eventLog
	a := e.agentWith(Options{Events: &l})
	checker := &fakeHealth{states: map[string]health.State{"web/10.0.0.11": {Healthy: true, Weight: health.NoWeight},
		"web/10.0.0.12": {Healthy: true, Weight: health.NoWeight}}}
	a.opts.Health = checker
	a.setConfig(a.cfg, Changes{All: true})
	e.reconcile(a)
	for _, step := range []struct {
		healthy bool
		want    []string
	}{
		{true, nil},
		{false, []string{"health unhealthy web/10.0.0.11"}},
		{false, nil},
		{true, []string{"health healthy web/10.0.0.11"}},
	} {
		checker.states = map[string]health.State{"web/10.0.0.11": {Healthy: step.healthy, Weight: health.NoWeight},
			"web/10.0.0.12": {Healthy: true, Weight: health.NoWeight}}
		a.refreshHealth()
		a.refreshHealth()
		if got := l.take(); !slices.Equal(got, step.want) {
			t.Fatalf("healthy %v: events %q, want %q", step.healthy, got, step.want)
		}
	}
}

// The holder reports a VIP taken once when the cluster gives it to this
// director, and released once when it goes back, whatever the passes.
func TestHolderReportsOwnershipOnce(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Preempt: true, Quorum: 1}, vip)
	d1, d2 := newClusterDirector(t, f, "d1", 200), newClusterDirector(t, f, "d2", 100)
	var l1, l2 eventLog
	d1.agent.holder.SetEvents(&l1)
	d2.agent.holder.SetEvents(&l2)
	d1.env.reconcile(d1.agent)
	d2.env.reconcile(d2.agent)
	if !slices.Equal(l1.take(), []string{"ownership taken 10.0.0.50"}) || len(l2.take()) != 0 {
		t.Fatalf("first passes: d1 %q, d2 %q", l1.got, l2.got)
	}
	f.SetUp("d1", false)
	d2.takeover(t)
	d2.takeover(t)
	if got := l2.take(); !slices.Equal(got, []string{"ownership taken 10.0.0.50"}) {
		t.Fatalf("takeover by d2: %q", got)
	}
	f.SetUp("d1", true)
	d2.takeover(t)
	d2.takeover(t)
	if got := l2.take(); !slices.Equal(got, []string{"ownership released 10.0.0.50"}) {
		t.Fatalf("handback by d2: %q", got)
	}
}
