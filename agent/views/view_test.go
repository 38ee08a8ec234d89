package views

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// problemDirector is a director of five services, four with a problem
// each, reconciled, with the kernel then changed behind its back.
func problemDirector(t *testing.T) (*testEnv, *Views) {
	t.Helper()
	e := newEnv(t)
	svc := func(name, vip string, port int, backends ...string) {
		e.service(name, fmt.Sprintf("service: %s\nvip: %s\nports: [%d]\nbackends:\n  - %s\n", name, vip, port,
			strings.Join(backends, "\n  - ")))
	}
	svc("web", "10.0.0.50", 80, "{address: 10.0.0.11}", "{address: 10.0.0.12}")
	svc("zero", "10.0.0.50", 81, "{address: 10.0.0.11, weight: 0}")
	svc("gone", "10.0.0.51", 80, "{address: 10.0.0.11}")
	svc("lost", "10.0.0.51", 81, "{address: 10.0.0.11}", "{address: 10.0.0.12}")
	svc("sick", "10.0.0.52", 80, "{address: 10.0.0.11, health: {checks: [{type: tcp}]}}", "{address: 10.0.0.12}")
	a := e.agentWith(agent.Options{Health: &fakeHealth{states: map[string]health.State{
		"sick/10.0.0.11": {Known: true, Weight: health.NoWeight, LastError: "connection refused"}}}})
	e.reconcile(a)
	key := func(vip string, port uint16) ipvs.ServiceKey {
		return ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr(vip), Port: port}
	}
	if err := e.ipvs.DeleteService(context.Background(), key("10.0.0.51", 80)); err != nil {
		t.Fatal(err)
	}
	lost := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 81}
	if err := e.ipvs.DeleteDestination(context.Background(), key("10.0.0.51", 81), lost); err != nil {
		t.Fatal(err)
	}
	if err := e.ipvs.SetConns(key("10.0.0.50", 80), ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.11"), Port: 80}, 3, 2); err != nil {
		t.Fatal(err)
	}
	return e, a
}

func names(services []ServiceStatus) string {
	var out []string
	for _, s := range services {
		out = append(out, fmt.Sprintf("%s(%d)", s.Name, len(s.Destinations)))
	}
	return strings.Join(out, " ")
}

// Each view lists what it promises: every service in the order of their
// IPVS keys, or the ones with a problem worst first; the totals are the same
// whatever the view.
func TestStatusViews(t *testing.T) {
	_, a := problemDirector(t)
	for _, c := range []struct {
		view View
		want string // names(Services)
	}{
		{"", "web(2) zero(1) gone(1) lost(2) sick(2)"},
		{ViewFull, "web(2) zero(1) gone(1) lost(2) sick(2)"},
		{ViewAuto, "web(2) zero(1) gone(1) lost(2) sick(2)"}, // up to SummaryAbove: full
		{ViewServices, "web(0) zero(0) gone(0) lost(0) sick(0)"},
		{ViewSummary, "gone(1) zero(1) lost(2) sick(2)"},
		{ViewProblems, "gone(1) zero(1) lost(2) sick(2)"},
	} {
		st, err := a.Status(context.Background(), StatusQuery{View: c.view})
		if err != nil {
			t.Fatal(err)
		}
		if got := names(st.Services); got != c.want {
			t.Errorf("view %q: services %s, want %s", c.view, got, c.want)
		}
		want := StatusTotals{Services: 5, IPVSServices: 5, InKernel: 4, VIPs: 3, VIPsHeld: 3, Problems: 4,
			Backends: BackendCounts{Total: 8, Eligible: 4, Unhealthy: 1, NotInKernel: 2, ActiveConns: 3, InactiveConns: 2}}
		if st.Totals != want {
			t.Errorf("view %q: totals\n %+v\nwant\n %+v", c.view, st.Totals, want)
		}
	}
	st, err := a.Status(context.Background(), StatusQuery{View: ViewSummary})
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	for _, s := range st.Services {
		problems = append(problems, s.Name+": "+s.Problem)
	}
	want := "gone: not in the kernel, zero: no backend takes new connections, lost: 1 backend not in the kernel, " +
		"sick: 1 backend unhealthy"
	if got := strings.Join(problems, ", "); got != want {
		t.Errorf("problems: %s\nwant %s", got, want)
	}
	sick := st.Services[3]
	if sick.Backends != (BackendCounts{Total: 2, Eligible: 1, Unhealthy: 1}) || sick.Destinations[0].Health != "unhealthy" ||
		sick.Destinations[0].HealthError != "connection refused" {
		t.Errorf("sick: %+v", sick)
	}
}

// The summary lists ProblemsListed services with a problem at most, the
// problems view all of them, and auto gives the summary above
// SummaryAbove IPVS services.
func TestStatusSummaryAtScale(t *testing.T) {
	e := newEnv(t)
	e.bulkServices(SummaryAbove+ProblemsListed+5, "{address: 10.0.0.11, weight: 0}")
	e.service("ok", "service: ok\nvip: 10.0.0.60\nports: [80]\nbackends: [{address: 10.0.0.11}]\n")
	a := e.agent()
	e.reconcile(a)
	n := SummaryAbove + ProblemsListed + 6
	for _, c := range []struct {
		view   View
		want   View
		listed int
	}{
		{ViewAuto, ViewSummary, ProblemsListed},
		{ViewSummary, ViewSummary, ProblemsListed},
		{ViewProblems, ViewProblems, n - 1},
		{ViewFull, ViewFull, n},
	} {
		st, err := a.Status(context.Background(), StatusQuery{View: c.view})
		if err != nil {
			t.Fatal(err)
		}
		if st.View != c.want || len(st.Services) != c.listed || st.Totals.Problems != n-1 || st.Totals.IPVSServices != n {
			t.Errorf("view %q: answered %q with %d services, totals %+v; want %q, %d, %d problems of %d",
				c.view, st.View, len(st.Services), st.Totals, c.want, c.listed, n-1, n)
		}
	}
	// Selected down to SummaryAbove, auto shows them in full.
	st, err := a.Status(context.Background(), StatusQuery{View: ViewAuto, Services: []string{"s1*", "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	want := 1 // ok
	for i := range n - 1 {
		if strings.HasPrefix(fmt.Sprint("s", i), "s1") {
			want++
		}
	}
	if st.View != ViewFull || st.Totals.Services != want || len(st.Services) != want {
		t.Errorf("s1* and ok: view %q, %d services, totals %+v", st.View, len(st.Services), st.Totals)
	}
}

// --service takes names and globs; a pattern that matches nothing, a bad
// pattern or an unknown view is the caller's mistake (HTTP 400), said so.
func TestStatusSelection(t *testing.T) {
	_, a := problemDirector(t)
	for _, c := range []struct {
		services []string
		view     View
		want     string // names(Services), or the error
	}{
		{[]string{"web"}, "", "web(2)"},
		{[]string{"s*", "web"}, "", "web(2) sick(2)"},
		{[]string{"?o*"}, "", "gone(1) lost(2)"},
		{[]string{"web", "nothing", "x*"}, "", `no configured service is named or matches "nothing", "x*"`},
		{[]string{"[w"}, "", `service pattern "[w": syntax error in pattern`},
		{nil, "everything", `view "everything" is not full, services, summary, problems or auto`},
	} {
		st, err := a.Status(context.Background(), StatusQuery{Services: c.services, View: c.view})
		got := names(st.Services)
		if err != nil {
			if !errors.Is(err, errBadQuery) {
				t.Errorf("%q: %v is not errBadQuery", c.services, err)
			}
			got = strings.TrimPrefix(err.Error(), errBadQuery.Error()+": ")
		}
		if got != c.want {
			t.Errorf("%q view %q: %s, want %s", c.services, c.view, got, c.want)
		}
	}
	rec := httptest.NewRecorder()
	a.APIHandler().ServeHTTP(rec, httptest.NewRequest("GET", RouteStatus+"?service=nothing", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"nothing"`) {
		t.Errorf("unknown service over the API: %d %s", rec.Code, rec.Body)
	}
}

// The kernel's counters and rate estimates reach the status per
// destination, and the service adds up its destinations (lvsd status
// --stats and --rate).
func TestStatusStatsAndRates(t *testing.T) {
	e, a := problemDirector(t)
	svc := ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	rs := func(addr string) ipvs.DestinationKey {
		return ipvs.DestinationKey{Addr: netip.MustParseAddr(addr), Port: 80}
	}
	for addr, st := range map[string]ipvs.Stats{
		"10.0.0.11": {Connections: 10, PacketsIn: 100, PacketsOut: 90, BytesIn: 1000, BytesOut: 9000,
			Rates: ipvs.Rates{ConnectionsPerSecond: 1, PacketsInPerSecond: 2, PacketsOutPerSecond: 3, BytesInPerSecond: 4, BytesOutPerSecond: 5}},
		"10.0.0.12": {Connections: 5, PacketsIn: 1 << 33, BytesIn: 1 << 40,
			Rates: ipvs.Rates{ConnectionsPerSecond: 10, PacketsInPerSecond: 20, BytesInPerSecond: 40}},
	} {
		if err := e.ipvs.SetStats(svc, rs(addr), st); err != nil {
			t.Fatal(err)
		}
	}
	st, err := a.Status(context.Background(), StatusQuery{Services: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	web := st.Services[0]
	wantSum := BackendCounts{Connections: 15, PacketsIn: 100 + 1<<33, PacketsOut: 90, BytesIn: 1000 + 1<<40, BytesOut: 9000,
		Rates: Rates{Connections: 11, PacketsIn: 22, PacketsOut: 3, BytesIn: 44, BytesOut: 5}}
	got := web.Backends
	got.Total, got.Eligible, got.ActiveConns, got.InactiveConns = 0, 0, 0, 0
	if got != wantSum {
		t.Errorf("service sums %+v, want %+v", got, wantSum)
	}
	byAddr := map[string]DestinationStatus{}
	for _, d := range web.Destinations {
		byAddr[d.Address] = d
	}
	if d := byAddr["10.0.0.11:80"]; d.Connections != 10 || d.BytesOut != 9000 || d.Rates != (Rates{1, 2, 3, 4, 5}) {
		t.Errorf("10.0.0.11: %+v", d)
	}
	if d := byAddr["10.0.0.12:80"]; d.PacketsIn != 1<<33 || d.Rates.BytesIn != 40 {
		t.Errorf("10.0.0.12: %+v", d)
	}
	if st.Totals.Backends.Rates.Connections != 11 {
		t.Errorf("totals' rates %+v, want the sums over the selection", st.Totals.Backends.Rates)
	}
}

func TestStatusShowsKernelAndDrains(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	if _, err := a.Status(context.Background(), StatusQuery{}); err == nil {
		t.Fatal("status before the first pass should say not ready")
	}
	e.reconcile(a)
	svc := ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	rs2 := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 80}
	e.ipvs.SetConns(svc, rs2, 2, 1)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n")
	e.reload(a)
	e.reconcile(a)
	e.now = e.now.Add(7 * time.Second)
	st, err := a.Status(context.Background(), StatusQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Services) != 1 || !st.Services[0].VIPHeld || !st.Services[0].InKernel {
		t.Fatalf("status: %+v", st)
	}
	want := []DestinationStatus{
		{Address: "10.0.0.11:80", Forwarding: "route", ConfiguredWeight: 1, Weight: 1, Eligible: true, ReportedWeight: -1},
		{Address: "10.0.0.12:80", Forwarding: "route", ConfiguredWeight: -1, Weight: 0, ActiveConns: 2, InactiveConns: 1, DrainingFor: 7, ReportedWeight: -1},
	}
	if got := st.Services[0].Destinations; !slices.Equal(got, want) {
		t.Fatalf("destinations:\n got %+v\nwant %+v", got, want)
	}
}

// Over FreshLimit IPVS services the status answers from the passes'
// read-back, without a dump, and says how old its oldest numbers are; a
// query for one service reads that one now.
func TestStatusAtScale(t *testing.T) {
	e := newEnv(t)
	e.bulkServices(FreshLimit+10, "{address: 10.0.0.11}")
	counting := &countingIPVS{Interface: e.ipvs}
	k := e.kernel()
	k.IPVS = counting
	a := e.agentWith(agent.Options{Kernel: k})
	e.reconcile(a)
	counting.dumps = 0 // those of the pass
	st, err := a.Status(context.Background(), StatusQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Services) != FreshLimit+10 || counting.dumps != 0 || !st.KernelAsOf.Equal(e.now) {
		t.Errorf("all: %d services, %d dumps, numbers as of %v; want %d, 0, the pass", len(st.Services), counting.dumps, st.KernelAsOf, FreshLimit+10)
	}
	if st.Services[0].Destinations[0].Weight != 1 {
		t.Errorf("from the pass: %+v", st.Services[0].Destinations)
	}
	st, err = a.Status(context.Background(), StatusQuery{Services: []string{"s7"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Services) != 1 || st.Services[0].Name != "s7" || counting.dumps != 1 {
		t.Errorf("one service: %d services, %d dumps", len(st.Services), counting.dumps)
	}

	// A later pass that reads one service back does not make the others'
	// numbers look newer than they are.
	first := e.now
	e.now = e.now.Add(time.Minute)
	e.reconcile(a, ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.1.1"), Port: 1003})
	if st, err = a.Status(context.Background(), StatusQuery{}); err != nil {
		t.Fatal(err)
	}
	if !st.KernelAsOf.Equal(first) || !st.LastReconcile.Equal(e.now) {
		t.Errorf("after reading one service back: numbers as of %v, last pass %v; want %v, %v", st.KernelAsOf, st.LastReconcile, first, e.now)
	}
}

// countingIPVS counts destination dumps.
type countingIPVS struct {
	ipvs.Interface
	dumps int
}

func (c *countingIPVS) Destinations(ctx context.Context, k ipvs.ServiceKey) ([]ipvs.Destination, error) {
	c.dumps++
	return c.Interface.Destinations(ctx, k)
}
