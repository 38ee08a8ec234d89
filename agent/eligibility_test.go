package agent

import (
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/health"
)

// fakeHealth reports fixed states and records the targets it was given.
type fakeHealth struct {
	targets []health.Target
	states  map[string]health.State
}

func (f *fakeHealth) Set(t []health.Target) { f.targets = t }

// Update keeps the targets of other groups and appends t, as the monitor
// ends up with.
func (f *fakeHealth) Update(groups map[string]bool, t []health.Target) {
	f.targets = append(slices.DeleteFunc(slices.Clone(f.targets), func(x health.Target) bool { return groups[x.Group] }), t...)
}

func (f *fakeHealth) Snapshot() map[string]health.State { return f.states }

func (f *fakeHealth) States(keys []string, each func(int, health.State, bool)) {
	for i, k := range keys {
		st, ok := f.states[k]
		each(i, st, ok)
	}
}

// Changes hands every state, as a checker that cannot tell what changed.
func (f *fakeHealth) Changes() (map[string]health.State, []string, bool) {
	return f.states, nil, true
}
func (f *fakeHealth) Changed() <-chan struct{} { return nil }

func weightsOf(d planner.Desired) []int {
	var w []int
	for _, vs := range d.Services {
		for _, dst := range vs.Destinations {
			w = append(w, int(dst.Weight))
		}
	}
	return w
}

func TestWithHealth(t *testing.T) {
	const svc = "service: web\nvip: 10.0.0.50\nports: [80]\n"
	const checks = "health: {rise: 1, fall: 1, checks: [{type: http, port: 8080}]}\n"
	cases := []struct {
		name    string
		yaml    string
		health  map[string]planner.BackendHealth
		weights []int
		rule    string
	}{
		{"no health block: configured weights", svc + "backends: [{address: 10.0.0.11, weight: 3}, {address: 10.0.0.12}]\n",
			nil, []int{3, 1}, "all healthy"},
		{"one unhealthy goes to 0", svc + checks + "backends: [{address: 10.0.0.11, weight: 3}, {address: 10.0.0.12}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {Healthy: false, Weight: -1}, "web/10.0.0.12": {Healthy: true, Weight: -1}},
			[]int{0, 1}, "all healthy backends"},
		{"none healthy: all take connections", svc + checks + "backends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {}, "web/10.0.0.12": {}}, []int{1, 1}, "none healthy"},
		{"weighted: reported weights", svc + "health: {weight_header: true, checks: [{type: http}]}\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {Healthy: true, Weight: 1}, "web/10.0.0.12": {Healthy: true, Weight: 4}},
			[]int{1, 4}, "healthy, weight > 0"},
		{"weighted: reported 0 is out", svc + "health: {weight_header: true, checks: [{type: http}]}\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {Healthy: true, Weight: 1}, "web/10.0.0.12": {Healthy: true, Weight: 0}},
			[]int{1, 0}, "healthy, weight > 0"},
		{"failover below ratio", svc + checks + "failover: {ratio: 0.5}\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12}, {address: 10.0.0.13}, {address: 10.0.0.21, failover: true}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {Healthy: true}, "web/10.0.0.12": {}, "web/10.0.0.13": {}, "web/10.0.0.21": {Healthy: true}},
			[]int{0, 0, 0, 1}, "below the ratio"},
		{"drop if none healthy", svc + checks + "failover: {drop_if_none_healthy: true}\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.21, failover: true}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {}, "web/10.0.0.21": {}}, []int{0, 0}, "drop new connections"},
		{"configured weight 0 is never eligible", svc + checks + "backends: [{address: 10.0.0.11, weight: 0}, {address: 10.0.0.12}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {Healthy: true}, "web/10.0.0.12": {}}, []int{0, 1}, "none healthy"},
		{"sorry server: none healthy, it comes last", svc + checks + "sorry_server: 10.0.0.99\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {}, "web/10.0.0.12": {}}, []int{0, 0, 1}, "none healthy, drop new connections; the sorry server takes new connections"},
		{"sorry server: one healthy, no sorry server", svc + checks + "sorry_server: 10.0.0.99\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {}, "web/10.0.0.12": {Healthy: true}}, []int{0, 1}, "all healthy backends"},
		{"sorry server: every backend administratively out", svc + "sorry_server: 10.0.0.99\nbackends: [{address: 10.0.0.11, weight: 0}]\n",
			nil, []int{0, 1}, "sorry server"},
		{"sorry server, weighted: every backend reports 0", svc + "health: {weight_header: true, checks: [{type: http}]}\nsorry_server: 10.0.0.99\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {Healthy: true, Weight: 0}, "web/10.0.0.12": {Healthy: true, Weight: 0}},
			[]int{0, 0, 1}, "sorry server"},
		{"sorry server with a failover policy: none healthy", svc + checks + "sorry_server: 10.0.0.99\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.21, failover: true}]\n",
			map[string]planner.BackendHealth{"web/10.0.0.11": {}, "web/10.0.0.21": {}}, []int{0, 0, 1}, "sorry server"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := loadOne(t, c.yaml)
			before := weightsOf(cfg.Desired)
			d, decisions := planner.WithHealth(cfg.Desired, cfg.Services, c.health, nil)
			if got := weightsOf(d); !slices.Equal(got, c.weights) {
				t.Errorf("weights %v, want %v (rule %q)", got, c.weights, decisions["web"].Rule)
			}
			if !strings.Contains(decisions["web"].Rule, c.rule) {
				t.Errorf("rule %q, want it to mention %q", decisions["web"].Rule, c.rule)
			}
			if !slices.Equal(weightsOf(cfg.Desired), before) {
				t.Error("WithHealth modified its input")
			}
		})
	}
}

// A backend that is not eligible when its service is created still gets
// Maglev slots: added with its weight, then lowered to 0.
func TestIneligibleBackendAddedWithSlots(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nhealth: {checks: [{type: tcp}]}\nbackends: [{address: 10.0.0.11, weight: 2}, {address: 10.0.0.12}]\n")
	a := e.agent()
	checker := &fakeHealth{states: map[string]health.State{"web/10.0.0.11": {Weight: health.NoWeight},
		"web/10.0.0.12": {Healthy: true, Weight: health.NoWeight}}}
	a.opts.Health = checker
	a.setConfig(a.cfg, Changes{All: true})
	if len(checker.targets) != 2 || checker.targets[0].Key != "web/10.0.0.11" || checker.targets[0].Port != 80 {
		t.Fatalf("health targets: %+v", checker.targets)
	}
	got := e.reconcile(a)
	want := []string{
		"add-service tcp:10.0.0.50:80 mh flags=mh-fallback,mh-port",
		"add-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=2 route",
		"update-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=0 route",
		"add-destination tcp:10.0.0.50:80 10.0.0.12:80 weight=1 route",
		"add-address eth0 10.0.0.50/32",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
