package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/realserver"
	"github.com/lvsd/lvsd/agent/views"
)

var statusNow = time.Date(2025, 6, 1, 12, 0, 10, 0, time.UTC)

func directorStatus() views.Status {
	return views.Status{Node: "lvs1", Role: "director", Config: "/etc/lvsd/lvsd.yaml",
		LastReconcile: statusNow.Add(-4 * time.Second), LastDuration: 0.0032,
		Services: []views.ServiceStatus{
			{Name: "web", Key: "tcp:10.0.0.50:80", VIP: "10.0.0.50", Scheduler: "mh", Flags: "mh-fallback,mh-port",
				Rule:     "failover policy, unweighted: healthy primaries at or above the ratio",
				InKernel: true, VIPHeld: true, Destinations: []views.DestinationStatus{
					{Address: "10.0.0.11:80", Forwarding: "route", ConfiguredWeight: 3, Weight: 3, ActiveConns: 12, InactiveConns: 4},
					{Address: "10.0.0.13:80", Forwarding: "route", ConfiguredWeight: 1, Weight: -1},
					{Address: "10.0.0.14:80", Forwarding: "route", ConfiguredWeight: 1, Weight: 0, Health: "unhealthy",
						HealthError: "http: status 503", InactiveConns: 3},
					{Address: "10.0.0.15:80", Forwarding: "route", ConfiguredWeight: 1, Weight: 0, Health: "healthy"},
					{Address: "10.0.0.12:80", Forwarding: "route", ConfiguredWeight: -1, Weight: 0, ActiveConns: 2, InactiveConns: 1, DrainingFor: 7},
				}},
			{Name: "dns", Key: "fwmark:7/ipv6", VIP: "fd00::53", Scheduler: "rr",
				InKernel: false, VIPHeld: false, Destinations: []views.DestinationStatus{
					{Address: "[fd00::11]:0", Forwarding: "masq", ConfiguredWeight: 1, Weight: -1},
				}},
		}}
}

func TestWriteDirectorStatus(t *testing.T) {
	var b bytes.Buffer
	if err := writeDirectorStatus(&b, directorStatus(), columnsState, statusNow); err != nil {
		t.Fatal(err)
	}
	want := `director lvs1, config /etc/lvsd/lvsd.yaml
last reconcile 2025-06-01 12:00:06 (4s ago, took 3.2ms): ok

SERVICE  PROT LOCAL/REMOTE ADDRESS:PORT  SCHED/FORWARD             WEIGHT  CONFIGURED  ACTIVE  INACTIVE  STATE
web      TCP  10.0.0.50:80               mh (mh-fallback,mh-port)                      14      8         VIP held
           -> 10.0.0.11:80               Route                     3       3           12      4
           -> 10.0.0.13:80               Route                     -       1           0       0         NOT IN KERNEL
           -> 10.0.0.14:80               Route                     0       1           0       3         UNHEALTHY (http: status 503)
           -> 10.0.0.15:80               Route                     0       1           0       0         not eligible (failover policy)
           -> 10.0.0.12:80               Route                     0       -           2       1         removed, draining for 7s
dns      FWM  7 (ipv6)                   rr                                            0       0         NOT IN KERNEL, VIP not held
           -> [fd00::11]:0               Masq                      -       1           0       0         NOT IN KERNEL

eligible backends by:
  web: failover policy, unweighted: healthy primaries at or above the ratio
`
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteDirectorStatusFailedPass(t *testing.T) {
	st := views.Status{Node: "lvs1", Config: "c.yaml", LastReconcile: statusNow.Add(-3 * time.Minute),
		LastDuration: 1, LastError: "adding destination 10.0.0.11:80: file exists"}
	var b bytes.Buffer
	writeDirectorStatus(&b, st, columnsState, statusNow)
	if want := "(3m0s ago, took 1s): FAILED: adding destination 10.0.0.11:80: file exists\n\nno services configured\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("got:\n%s", b.String())
	}
}

// A rejected configuration is said under the header, with the time of
// the one still in force.
func TestWriteDirectorStatusConfigRejected(t *testing.T) {
	st := views.Status{Node: "lvs1", Config: "c.yaml", LastReconcile: statusNow, LastDuration: 0.001,
		ConfigLoadedAt: statusNow.Add(-time.Hour), ConfigError: `web.yaml:5:26: service "web": unknown key "wieght"`}
	var b bytes.Buffer
	writeDirectorStatus(&b, st, columnsState, statusNow)
	want := "configuration REJECTED, the one loaded 2025-06-01 11:00:10 (1h0m0s ago) runs: " +
		"web.yaml:5:26: service \"web\": unknown key \"wieght\"\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("got:\n%s\nwant a line\n%s", b.String(), want)
	}
}

func realServerStatus() realserver.Status {
	return realserver.Status{Node: "rs1", Drained: true, DrainedAt: statusNow.Add(-90 * time.Second),
		ConfiguredWeight: 100, Weight: 0,
		VIPs:         []netip.Addr{netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("fd00::50")},
		MissingVIPs:  []netip.Addr{netip.MustParseAddr("fd00::50")},
		TunnelVIPs:   []netip.Addr{netip.MustParseAddr("203.0.113.10")},
		DownTunnels:  []string{"tunl0 is not up"},
		HealthListen: ":8080", HealthPath: "/lvs/weight",
		Checks: []realserver.CheckResult{{Check: "tcp 127.0.0.1:80", OK: true}, {Check: "tcp [::1]:443", Error: "connection refused"}}}
}

func TestWriteRealServerStatus(t *testing.T) {
	var b bytes.Buffer
	if err := writeRealServerStatus(&b, realServerStatus(), statusNow); err != nil {
		t.Fatal(err)
	}
	want := `realserver rs1
drained since 2025-06-01 11:58:40 (1m30s ago): the weight endpoint announces 0 (configured 100)
weight endpoint: http://:8080/lvs/weight

VIP        ON LO
10.0.0.50  yes
fd00::50   MISSING

TUNNEL VIP    ON LO
203.0.113.10  yes
tunnel decapsulation: tunl0 is not up

LOCAL CHECK       RESULT
tcp 127.0.0.1:80  ok
tcp [::1]:443     FAILED: connection refused
`
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestStatusCommand runs `lvsd status` against a fake agent on a unix
// socket, for both roles, as a table and with --json.
func TestStatusCommand(t *testing.T) {
	for _, c := range []struct {
		name string
		body any
		want string
	}{
		{"director", directorStatus(), "  -> 10.0.0.12:80"},
		{"realserver", realServerStatus(), "drained since"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, sock := fakeStatusAgent(t, func(w http.ResponseWriter, _ *http.Request) { api.WriteJSON(w, c.body) })
			var out, errOut bytes.Buffer
			if err := run(ctx, []string{"status", "--socket", sock}, &out, &errOut); err != nil {
				t.Fatalf("status: %v (%s)", err, errOut.String())
			}
			if !strings.Contains(out.String(), c.want) {
				t.Errorf("table lacks %q:\n%s", c.want, out.String())
			}
			out.Reset()
			if err := run(ctx, []string{"status", "--socket", sock, "--json"}, &out, &errOut); err != nil {
				t.Fatal(err)
			}
			want, _ := json.MarshalIndent(c.body, "", "  ")
			if strings.TrimSpace(out.String()) != string(want) {
				t.Errorf("--json:\n%s\nwant:\n%s", out.String(), want)
			}
		})
	}
}

// fakeStatusAgent serves GET /v1/status with answer on a socket until the
// test ends; it returns a context for the test's commands and the socket.
func fakeStatusAgent(t *testing.T, answer http.HandlerFunc) (context.Context, string) {
	t.Helper()
	return fakeAgent(t, views.RouteStatus, answer)
}

// fakeAgent serves answer on GET route of a local socket, as the agent's API.
func fakeAgent(t *testing.T, route string, answer http.HandlerFunc) (context.Context, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "lvsd.sock")
	l, err := api.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+route, answer)
	go api.Serve(ctx, l, mux)
	return ctx, sock
}

func TestStatusCommandNoAgent(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"status", "--socket", filepath.Join(t.TempDir(), "none.sock")}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "is it running?") {
		t.Errorf("err = %v, want it to say no agent is running", err)
	}
}

// Above views.SummaryAbove services the agent answers a summary: totals,
// then the services with a problem (their problem first in the state),
// then what was left out and how to see it.
func TestWriteDirectorStatusSummary(t *testing.T) {
	st := directorStatus()
	st.View = views.ViewSummary
	st.Totals = views.StatusTotals{Services: 9000, IPVSServices: 10000, InKernel: 9999, VIPs: 1000, VIPsHeld: 1000, Problems: 57,
		Backends: views.BackendCounts{Total: 100000, Eligible: 99990, Unhealthy: 4, Draining: 1, NotInKernel: 1, ActiveConns: 14, InactiveConns: 8}}
	st.Services[0].Problem = "1 backend not in the kernel"
	st.Services[1].Problem = "not in the kernel"
	st.Services[0], st.Services[1] = st.Services[1], st.Services[0]
	var b bytes.Buffer
	if err := writeDirectorStatus(&b, st, columnsState, statusNow); err != nil {
		t.Fatal(err)
	}
	want := `director lvs1, config /etc/lvsd/lvsd.yaml
last reconcile 2025-06-01 12:00:06 (4s ago, took 3.2ms): ok

services: 9000 (10000 IPVS services, 9999 in the kernel); VIPs: 1000 (1000 held here)
backends: 100000: 99990 take new connections, 4 unhealthy, 1 draining, 1 NOT IN KERNEL
connections: 14 active, 8 inactive

57 IPVS services with a problem, worst first:
SERVICE  PROT LOCAL/REMOTE ADDRESS:PORT  SCHED/FORWARD             WEIGHT  CONFIGURED  ACTIVE  INACTIVE  STATE
dns      FWM  7 (ipv6)                   rr                                            0       0         NOT IN KERNEL, VIP not held
           -> [fd00::11]:0               Masq                      -       1           0       0         NOT IN KERNEL
web      TCP  10.0.0.50:80               mh (mh-fallback,mh-port)                      14      8         1 BACKEND NOT IN THE KERNEL, VIP held
           -> 10.0.0.11:80               Route                     3       3           12      4
           -> 10.0.0.13:80               Route                     -       1           0       0         NOT IN KERNEL
           -> 10.0.0.14:80               Route                     0       1           0       3         UNHEALTHY (http: status 503)
           -> 10.0.0.15:80               Route                     0       1           0       0         not eligible (failover policy)
           -> 10.0.0.12:80               Route                     0       -           2       1         removed, draining for 7s

eligible backends by:
  web: failover policy, unweighted: healthy primaries at or above the ratio

the 2 worst of 57 IPVS services with a problem are shown; lvsd status --problems lists them all

lvsd status --service NAME shows services with their backends (globs: 'web-*'), --all every one, --json all of it for scripts
`
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}

	st.Services, st.Totals.Problems = nil, 0
	b.Reset()
	writeDirectorStatus(&b, st, columnsState, statusNow)
	if want := "\n\nno problems: every IPVS service is in the kernel with its backends, and some take new connections\n\n" +
		"lvsd status --service NAME"; !strings.Contains(b.String(), want) {
		t.Errorf("without problems:\n%s", b.String())
	}
}

// The flags choose the view the agent is asked for; the table asks for
// auto (full up to views.SummaryAbove services), --json for everything.
// The agent answers compact JSON; --json prints it indented.
func TestStatusCommandViews(t *testing.T) {
	var asked []string
	ctx, sock := fakeStatusAgent(t, func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RawQuery)
		api.WriteCompactJSON(w, directorStatus())
	})
	for _, c := range []struct {
		args  []string
		query string // "": a usage error
	}{
		{nil, "view=auto"},
		{[]string{"--json"}, "view=full"},
		{[]string{"--all"}, "view=full"},
		{[]string{"--summary"}, "view=summary"},
		{[]string{"--problems", "--json"}, "view=problems"},
		{[]string{"--service", "web, api-*"}, "service=web&service=api-%2A&view=auto"},
		{[]string{"--all", "--problems"}, ""},
	} {
		asked = nil
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"status", "--socket", sock}, c.args...), &out, &errOut)
		if c.query == "" {
			if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--all and --problems: choose one") {
				t.Errorf("%v: %v, want a usage error", c.args, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if len(asked) != 1 || asked[0] != c.query {
			t.Errorf("%v asked %q, want %q", c.args, asked, c.query)
		}
		if slices.Contains(c.args, "--json") {
			want, _ := json.MarshalIndent(directorStatus(), "", "  ")
			if out.String() != string(want)+"\n" {
				t.Errorf("%v printed:\n%s\nwant:\n%s", c.args, out.String(), want)
			}
		}
	}
}

// A VIP off the agent file's interface says where it is, and an interface
// down that holds VIPs back is named.
func TestWriteDirectorStatusInterfaces(t *testing.T) {
	st := views.Status{Node: "lvs1", Config: "c.yaml", LastReconcile: statusNow.Add(-time.Second), InterfacesDown: "eth1",
		Services: []views.ServiceStatus{
			{Name: "shop", Key: "tcp:10.0.20.50:443", VIP: "10.0.20.50", Scheduler: "mh", InKernel: true, VIPHeld: true, Interface: "eth0.20"},
			{Name: "web", Key: "tcp:10.0.0.50:80", VIP: "10.0.0.50", Scheduler: "mh", InKernel: true, VIPHeld: false},
		}}
	var b bytes.Buffer
	if err := writeDirectorStatus(&b, st, columnsState, statusNow); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"interface eth1 down: not serving its VIPs (they return when it is up)\n", "VIP held on eth0.20\n", "VIP not held\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}
