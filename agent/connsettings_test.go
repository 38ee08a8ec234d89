package agent

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/ipvs"
)

func TestPlanTimeouts(t *testing.T) {
	s := time.Second
	cases := []struct {
		name       string
		want, have ipvs.Timeouts
		ops        []string
	}{
		{"none configured: the kernel's stay", ipvs.Timeouts{}, ipvs.Timeouts{}, nil},
		{"seed 000 over the kernel's defaults", ipvs.Timeouts{TCP: 60 * s, TCPFin: 60 * s, UDP: 60 * s}, ipvs.DefaultTimeouts,
			[]string{"set-ipvs-timeouts tcp=1m0s tcp_fin=1m0s udp=1m0s (was tcp=15m0s tcp_fin=2m0s udp=5m0s)"}},
		{"only what differs, only what is configured", ipvs.Timeouts{TCP: 3 * s, UDP: 300 * s}, ipvs.Timeouts{TCP: 900 * s, TCPFin: 7 * s, UDP: 300 * s},
			[]string{"set-ipvs-timeouts tcp=3s (was tcp=15m0s)"}},
		{"already so", ipvs.Timeouts{TCPFin: 7 * s}, ipvs.Timeouts{TCP: 900 * s, TCPFin: 7 * s, UDP: 300 * s}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops, _ := planner.Plan(planner.PlanInput{Desired: planner.Desired{Timeouts: c.want}, Actual: planner.Actual{Timeouts: c.have}})
			if got := planner.OpStrings(ops); !slices.Equal(got, c.ops) {
				t.Errorf("ops %q, want %q", got, c.ops)
			}
			after := planner.Actual{Timeouts: c.have}
			after.Applied(ops, make([]error, len(ops)))
			if after.Timeouts.Differs(c.want) != (ipvs.Timeouts{}) {
				t.Errorf("after the ops the kernel holds %+v, not %+v", after.Timeouts, c.want)
			}
		})
	}
}

// The agent sets the timeouts its file names, leaves the others as someone
// set them, plans nothing once they hold, puts them back when someone
// changes them, and a restarted agent finds nothing to do.
func TestTimeoutsAdoptedNotFought(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.ipvs.SetTimeouts(ctx, ipvs.Timeouts{UDP: 77 * time.Second}); err != nil { // another user's choice
		t.Fatal(err)
	}
	e.ipvs.Ops()
	writeTestFile(t, filepath.Join(e.dir, "lvsd.yaml"),
		"node: d1\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\nipvs: {timeouts: {tcp: 3s, tcp_fin: 2s}}\n")
	e.service("web", webTwo)
	a := e.agent()
	if got := e.reconcile(a); !slices.Contains(got, "set-timeouts tcp=3s tcp_fin=2s") {
		t.Fatalf("first pass: %q", got)
	}
	want := ipvs.Timeouts{TCP: 3 * time.Second, TCPFin: 2 * time.Second, UDP: 77 * time.Second}
	if got, _ := e.ipvs.Timeouts(ctx); got != want {
		t.Errorf("kernel timeouts %+v, want %+v", got, want)
	}
	if got := e.resync(a); len(got) != 0 {
		t.Errorf("second pass made calls: %q", got)
	}
	if err := e.ipvs.SetTimeouts(ctx, ipvs.Timeouts{TCP: 900 * time.Second}); err != nil { // behind lvsd's back
		t.Fatal(err)
	}
	e.ipvs.Ops()
	if got := e.resync(a); !slices.Equal(got, []string{"set-timeouts tcp=3s"}) {
		t.Errorf("after a change behind its back: %q", got)
	}
	if got := e.resync(e.agent()); len(got) != 0 {
		t.Errorf("restarted agent made calls: %q", got)
	}
}

// A backend's thresholds go into its destination; changing one is one
// update, and a second pass is empty.
func TestThresholdsReachTheKernel(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11, upper_threshold: 2, lower_threshold: 1}\n  - {address: 10.0.0.12}\n")
	a := e.agent()
	got := e.reconcile(a)
	if !slices.Contains(got, "add-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=1 route upper 2 lower 1") {
		t.Fatalf("first pass: %q", got)
	}
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11, upper_threshold: 2}\n  - {address: 10.0.0.12}\n")
	e.reload(a)
	if got := e.reconcile(a); !slices.Equal(got, []string{"update-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=1 route upper 2 lower 0"}) {
		t.Errorf("lower threshold removed: %q", got)
	}
	if got := e.resync(a); len(got) != 0 {
		t.Errorf("second pass made calls: %q", got)
	}
}

// The sorry server is added while no backend is eligible, goes to weight 0
// when one is again (its connections go on), and is deleted once they are
// gone; the backends keep their destinations (and Maglev slots) all along.
func TestSorryServerLifecycle(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nsorry_server: 10.0.0.99\nhealth: {checks: [{type: tcp}]}\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12}]\n")
	a := e.agent()
	checker := &fakeHealth{states: map[string]health.State{"web/10.0.0.11": {Healthy: true, Weight: health.NoWeight},
		"web/10.0.0.12": {Healthy: true, Weight: health.NoWeight}}}
	a.opts.Health = checker
	a.setConfig(a.cfg, Changes{All: true})
	e.reconcile(a)
	setHealth := func(h1, h2 bool) {
		checker.states = map[string]health.State{"web/10.0.0.11": {Healthy: h1, Weight: health.NoWeight},
			"web/10.0.0.12": {Healthy: h2, Weight: health.NoWeight}}
		a.refreshHealth()
	}
	sorry := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.99"), Port: 80}
	steps := []struct {
		name    string
		h1, h2  bool
		advance time.Duration
		conns   int // on the sorry server
		want    []string
		status  string // the sorry server's row in lvsd status: configured weight/kernel weight/eligible
	}{
		{"both unhealthy: the sorry server comes", false, false, 0, 0, []string{
			"update-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=0 route",
			"update-destination tcp:10.0.0.50:80 10.0.0.12:80 weight=0 route",
			"add-destination tcp:10.0.0.50:80 10.0.0.99:80 weight=1 route"}, "1/1/true"},
		{"one recovers: the sorry server drains", true, false, time.Second, 2, []string{
			"update-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=1 route",
			"update-destination tcp:10.0.0.50:80 10.0.0.99:80 weight=0 route"}, "-1/0/false"},
		{"its connections go on", true, false, 10 * time.Second, 2, nil, "-1/0/false"},
		{"they are gone: deleted", true, false, time.Second, 0, []string{"delete-destination tcp:10.0.0.50:80 10.0.0.99:80"}, ""},
	}
	for _, s := range steps {
		e.now = e.now.Add(s.advance)
		setHealth(s.h1, s.h2)
		_ = e.ipvs.SetConns(webKey, sorry, s.conns, 0) // fails before it is added: nothing to set then
		a.pending.add(webKey)                          // a drain in progress is looked at every Check
		if got := e.reconcile(a); !slices.Equal(got, s.want) {
			t.Fatalf("%s:\n got %q\nwant %q", s.name, got, s.want)
		}
		if got := sorryRow(t, e, a); got != s.status {
			t.Errorf("%s: status of the sorry server %q, want %q", s.name, got, s.status)
		}
	}
	dsts, _ := e.ipvs.Destinations(context.Background(), webKey)
	if len(dsts) != 2 {
		t.Errorf("destinations left: %+v", dsts)
	}
	if rule := a.eligibility.At("web").Rule; strings.Contains(rule, "sorry") {
		t.Errorf("rule with a healthy backend: %q", rule)
	}
}

// sorryRow is the sorry server's destination as lvsd status shows it,
// "configured/kernel/eligible": its weight in the kernel, and while the
// pass wants it (no backend is eligible) its configured weight and
// eligible; else -1 and false. "" when the kernel has none.
func sorryRow(t *testing.T, e *testEnv, a *Agent) string {
	t.Helper()
	s := a.Published()
	vs := s.Config.Desired.Services[0]
	kernel, err := e.ipvs.Destinations(context.Background(), vs.ServiceKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kernel {
		if !vs.IsSorry(k.DestinationKey) {
			continue
		}
		configured, eligible := -1, false
		wanted, ok := planner.FindService(s.Desired, vs.ServiceKey)
		if ok && slices.ContainsFunc(wanted.Destinations, func(d planner.Destination) bool { return vs.IsSorry(d.Key()) }) {
			configured, eligible = int(vs.Sorry.Weight), true
		}
		return fmt.Sprintf("%d/%d/%v", configured, k.Weight, eligible)
	}
	return ""
}
