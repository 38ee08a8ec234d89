package agent

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs"
)

func TestOverridesWith(t *testing.T) {
	web := config.Service{Name: "web", Ports: []l4.PortRange{{From: 80, To: 80}}, Backends: []config.Backend{
		{Addr: netip.MustParseAddr("10.0.0.11"), Weight: 100},
		{Addr: netip.MustParseAddr("10.0.0.12"), Port: 8080, Weight: 100},
		{Addr: netip.MustParseAddr("10.0.0.12"), Port: 8081, Weight: 100},
		{Addr: netip.MustParseAddr("2001:db8::1"), Port: 80, Weight: 100},
	}}
	services := []*config.Service{&web, {Name: "dns"}}
	now := time.Unix(5000, 0)
	seven := 7
	drained := planner.Overrides{"web/10.0.0.11": {Service: "web", Backend: "10.0.0.11", Drained: true, DrainedAt: time.Unix(1, 0)}}
	for _, c := range []struct {
		name     string
		in       planner.Overrides
		change   planner.BackendChange
		want     planner.BackendOverride
		wantErr  string // substring; "" = no error
		notFound bool
	}{
		{name: "drain by address", change: planner.BackendChange{Action: planner.ActionDrain, Service: "web", Backend: "10.0.0.11"},
			want: planner.BackendOverride{Service: "web", Backend: "10.0.0.11", Drained: true, DrainedAt: now}},
		{name: "drain by the kernel's address:port of a backend without port",
			change: planner.BackendChange{Action: planner.ActionDrain, Service: "web", Backend: "10.0.0.11:80"},
			want:   planner.BackendOverride{Service: "web", Backend: "10.0.0.11", Drained: true, DrainedAt: now}},
		{name: "drain again keeps the first time", in: drained,
			change: planner.BackendChange{Action: planner.ActionDrain, Service: "web", Backend: "10.0.0.11"},
			want:   drained["web/10.0.0.11"]},
		{name: "undrain", in: drained, change: planner.BackendChange{Action: planner.ActionUndrain, Service: "web", Backend: "10.0.0.11"},
			want: planner.BackendOverride{Service: "web", Backend: "10.0.0.11"}},
		{name: "weight", change: planner.BackendChange{Action: planner.ActionWeight, Service: "web", Backend: "10.0.0.12:8081", Weight: 7},
			want: planner.BackendOverride{Service: "web", Backend: "10.0.0.12:8081", Weight: &seven, WeightAt: now}},
		{name: "weight of an IPv6 backend", change: planner.BackendChange{Action: planner.ActionWeight, Service: "web", Backend: "[2001:db8::1]:80", Weight: 7},
			want: planner.BackendOverride{Service: "web", Backend: "[2001:db8::1]:80", Weight: &seven, WeightAt: now}},
		{name: "clear", in: drained, change: planner.BackendChange{Action: planner.ActionClear, Service: "web", Backend: "10.0.0.11"},
			want: planner.BackendOverride{Service: "web", Backend: "10.0.0.11"}},
		{name: "unknown service", change: planner.BackendChange{Action: planner.ActionDrain, Service: "mail", Backend: "10.0.0.11"},
			wantErr: `no service "mail" is configured (configured: dns, web)`, notFound: true},
		{name: "unknown backend", change: planner.BackendChange{Action: planner.ActionDrain, Service: "web", Backend: "10.0.0.99"},
			wantErr:  `service "web" has no backend 10.0.0.99 (its backends: 10.0.0.11, 10.0.0.12:8080, 10.0.0.12:8081, [2001:db8::1]:80)`,
			notFound: true},
		{name: "a port the service does not listen on", change: planner.BackendChange{Action: planner.ActionDrain, Service: "web", Backend: "10.0.0.11:443"},
			wantErr: `has no backend 10.0.0.11:443`, notFound: true},
		{name: "ambiguous address", change: planner.BackendChange{Action: planner.ActionDrain, Service: "web", Backend: "10.0.0.12"},
			wantErr: "ambiguous: name one of 10.0.0.12:8080, 10.0.0.12:8081"},
		{name: "not an address", change: planner.BackendChange{Action: planner.ActionDrain, Service: "web", Backend: "web-1"},
			wantErr: `backend "web-1" is not an address or address:port`},
		{name: "weight out of range", change: planner.BackendChange{Action: planner.ActionWeight, Service: "web", Backend: "10.0.0.11", Weight: 65536},
			wantErr: "weight 65536 is out of range 0-65535"},
		{name: "negative weight", change: planner.BackendChange{Action: planner.ActionWeight, Service: "web", Backend: "10.0.0.11", Weight: -1},
			wantErr: "weight -1 is out of range"},
		{name: "unknown action", change: planner.BackendChange{Action: "maint", Service: "web", Backend: "10.0.0.11"},
			wantErr: `action "maint" is not one of`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := maps.Clone(c.in)
			out, got, err := c.in.With(services, c.change, now)
			if !maps.EqualFunc(before, c.in, sameOverride) {
				t.Errorf("the input map was modified: %v, was %v", c.in, before)
			}
			if c.wantErr != "" {
				var ce *planner.ChangeError
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.As(err, &ce) || ce.NotFound != c.notFound {
					t.Fatalf("err = %v, want one with %q (not found: %v)", err, c.wantErr, c.notFound)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sameOverride(got, c.want) {
				t.Fatalf("override %+v, want %+v", got, c.want)
			}
			if stored, ok := out[got.Key()]; ok != !got.Empty() || ok && !sameOverride(stored, got) {
				t.Errorf("in the map: %+v (present %v) for %+v", stored, ok, got)
			}
		})
	}
}

func sameOverride(a, b planner.BackendOverride) bool {
	wa, wb := a.Weight, b.Weight
	a.Weight, b.Weight = nil, nil
	return a == b && (wa == nil) == (wb == nil) && (wa == nil || *wa == *wb)
}

// change changes a backend of a on the caller's goroutine (what the
// loop runs for ChangeBackend) and fails the test on error. It returns the
// override and the snapshot of the pass that applied it.
func (e *testEnv) change(a *Agent, action, service, backend string, weight int) (planner.BackendOverride, *Snapshot) {
	e.t.Helper()
	ov, after, err := a.changeBackend(context.Background(), planner.BackendChange{Action: action, Service: service, Backend: backend, Weight: weight})
	if err != nil {
		e.t.Fatal(err)
	}
	return ov, after
}

const webWeighted = "service: web\nvip: 10.0.0.50\nports: [80, 443]\nbackends:\n  - {address: 10.0.0.11, weight: 100}\n  - {address: 10.0.0.12, weight: 100}\n"

// An override goes through the eligibility policy like health: one weight
// update per IPVS service, never a delete; it stays across a restart, a
// file change of the backend's weight, and goes with undrain, clear, or the
// backend leaving the file.
func TestBackendOverrideAppliedKeptCleared(t *testing.T) {
	e := newEnv(t)
	e.service("web", webWeighted)
	a := e.agent()
	e.reconcile(a)
	updates := func(w int) []string {
		return []string{
			"update-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=" + strconv.Itoa(w) + " route",
			"update-destination tcp:10.0.0.50:443 10.0.0.11:443 weight=" + strconv.Itoa(w) + " route",
		}
	}
	for _, step := range []struct {
		name   string
		do     func() *Agent // returns the agent from then on
		want   []string      // IPVS ops of the step
		kernel int           // 10.0.0.11's kernel weight after it; -1: gone
		drain  bool          // 10.0.0.11 drained in the status
		config int           // its configured weight in the status
	}{
		{name: "drain", do: func() *Agent { e.change(a, planner.ActionDrain, "web", "10.0.0.11", 0); return a },
			want: updates(0), kernel: 0, drain: true, config: 100},
		{name: "restart adopts", do: func() *Agent { a = e.agent(); e.reconcile(a); return a },
			kernel: 0, drain: true, config: 100},
		{name: "file changes the weight: the drain stays", do: func() *Agent {
			e.service("web", strings.Replace(webWeighted, "10.0.0.11, weight: 100", "10.0.0.11, weight: 40", 1))
			e.reload(a)
			e.reconcile(a)
			return a
		}, kernel: 0, drain: true, config: 40},
		{name: "weight while drained", do: func() *Agent { e.change(a, planner.ActionWeight, "web", "10.0.0.11", 7); return a },
			kernel: 0, drain: true, config: 40},
		{name: "undrain keeps the weight override", do: func() *Agent { e.change(a, planner.ActionUndrain, "web", "10.0.0.11", 0); return a },
			want: updates(7), kernel: 7, config: 40},
		{name: "clear: the file's weight", do: func() *Agent { e.change(a, planner.ActionClear, "web", "10.0.0.11", 0); return a },
			want: updates(40), kernel: 40, config: 40},
		{name: "drain again", do: func() *Agent { e.change(a, planner.ActionDrain, "web", "10.0.0.11", 0); return a },
			want: updates(0), kernel: 0, drain: true, config: 40},
	} {
		a = step.do()
		if got := e.ipvs.Ops(); !slices.Equal(got, step.want) {
			t.Errorf("%s: IPVS ops %q, want %q", step.name, got, step.want)
		}
		if got := e.reconcile(a); len(got) != 0 {
			t.Errorf("%s: the next pass made calls: %q", step.name, got)
		}
		checkBackend(t, step.name, e, a, step.kernel, step.drain, step.config)
	}

	// The backend leaves the file: the override goes (the record too), and
	// the backend drains as any removed one does.
	e.service("web", strings.Replace(webWeighted, "  - {address: 10.0.0.11, weight: 100}\n", "", 1))
	e.reload(a)
	e.reconcile(a)
	if len(a.overrides) != 0 {
		t.Errorf("after the backend left the file: overrides %v", a.overrides)
	}
	if got, err := LoadOverrides(filepath.Join(e.dir, "state")); err != nil || len(got) != 0 {
		t.Errorf("after the backend left the file: record %v, %v", got, err)
	}
	// Back in the file, it does not get the override back.
	e.service("web", webWeighted)
	e.reload(a)
	e.reconcile(a)
	checkBackend(t, "back in the file", e, a, 100, false, 100)
}

// checkBackend checks 10.0.0.11 in every IPVS service: its weight in the
// kernel, the operator's drain and the file's weight in force.
func checkBackend(t *testing.T, step string, e *testEnv, a *Agent, kernel int, drained bool, configured int) {
	t.Helper()
	s := a.Published()
	for _, vs := range s.Config.Desired.Services {
		for _, d := range vs.Destinations {
			if d.Addr() != netip.MustParseAddr("10.0.0.11") {
				continue
			}
			inKernel, _ := e.ipvs.Destinations(context.Background(), vs.ServiceKey)
			gotKernel := -1
			for _, k := range inKernel {
				if k.DestinationKey == d.Key() {
					gotKernel = k.Weight
				}
			}
			gotDrained := s.Overrides[vs.Backend(d)].Drained
			if gotKernel != kernel || gotDrained != drained || int(d.Weight) != configured {
				t.Errorf("%s: %s %s: kernel weight %d, drained %v, configured %d; want %d, %v, %d",
					step, vs.ServiceKey, d.Key(), gotKernel, gotDrained, d.Weight, kernel, drained, configured)
			}
		}
	}
}

// A drained backend on an empty kernel (a reboot) is added with its
// file's weight, then set to 0: it keeps its Maglev slots, as every other
// director has them.
func TestDrainedBackendAfterReboot(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	e.change(a, planner.ActionDrain, "web", "10.0.0.11", 0)
	e.ipvs = ipvs.NewFake()
	a = e.agent()
	got := e.reconcile(a)
	want := []string{
		"add-service tcp:10.0.0.50:80 mh flags=mh-fallback,mh-port",
		"add-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=1 route",
		"update-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=0 route",
		"add-destination tcp:10.0.0.50:80 10.0.0.12:80 weight=1 route",
	}
	if got = slices.DeleteFunc(got, func(op string) bool { return strings.Contains(op, "address") }); !slices.Equal(got, want) {
		t.Fatalf("after a reboot:\n got %q\nwant %q", got, want)
	}
}

// A change is a pass of its service only: among 1,000 services it reads
// one IPVS service back and updates one destination, and reads no file.
func TestBackendChangeIsTargeted(t *testing.T) {
	e, a, c := countedDirector(t, 1000)
	ov, after := e.change(a, planner.ActionDrain, "s00500", "10.1.0.3", 0)
	if got, want := e.ipvs.Ops(), []string{"update-destination tcp:10.0.0.1:1500 10.1.0.3:1500 weight=0 route"}; !slices.Equal(got, want) {
		t.Errorf("ops %q, want %q", got, want)
	}
	if c.ipvs > 3 || c.stats+c.reads+c.lists+c.nat+c.sysctls+c.daemons != 0 {
		t.Errorf("one drain cost %v; want at most 3 IPVS calls and nothing else", *c)
	}
	key := ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.1"), Port: 1500}
	var weights []int
	for _, d := range after.Actual.Services.At(key).Destinations {
		if d.Addr == netip.MustParseAddr("10.1.0.3") {
			weights = append(weights, d.Weight)
		}
	}
	if !slices.Equal(weights, []int{0}) || !ov.Drained || after.Err != "" {
		t.Errorf("answer %+v, pass error %q, kernel weights %v; want drained, none, [0]", ov, after.Err, weights)
	}
}

func TestBackendChangeErrorsChangeNothing(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	for _, c := range []planner.BackendChange{
		{Action: planner.ActionDrain, Service: "mail", Backend: "10.0.0.11"},
		{Action: planner.ActionDrain, Service: "web", Backend: "10.0.0.13"},
		{Action: planner.ActionWeight, Service: "web", Backend: "10.0.0.11", Weight: 1 << 20},
	} {
		if _, _, err := a.changeBackend(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if got := e.ipvs.Ops(); len(got) != 0 || len(a.overrides) != 0 {
		t.Errorf("refused changes made ops %q, overrides %v", got, a.overrides)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "state", overridesFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused changes wrote the record: %v", err)
	}
}

// `lvsd plan` plans with the recorded overrides: a drained backend at
// weight 0 in the kernel is no change.
func TestPlanForTakesOverridesIn(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	e.change(a, planner.ActionDrain, "web", "10.0.0.11", 0)
	cfg, err := LoadConfig(filepath.Join(e.dir, "lvsd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := PlanFor(context.Background(), cfg, e.kernel(), nil)
	if err != nil || len(ops) != 0 {
		t.Errorf("plan with the backend drained: %v, %v; want nothing", ops, err)
	}
}
