//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestNotifyHook: three directors (priorities 250, 200, 150) share a VIP
// whose two backends are health-checked. Every director runs the same
// program as its on_ownership and on_health hook; it appends its LVSD_*
// environment to a file.
//
//  1. The failover gap without hooks, for reference (measureGaps: the
//     owner's switch port is cut and restored three times).
//  2. With the recording hook: one backend fails its checks and recovers;
//     every director's hook sees "unhealthy" then "healthy" for it, once
//     each. Then the owner is cut three times: the owner's hook sees each
//     release and each take-back once, the standby's each takeover and
//     release once, the third director's nothing.
//  3. The hook is replaced by one that sleeps far beyond the timeout (2s):
//     the failover gap stays within the bound and near the gap of step 1,
//     and the runs end as timeouts.
func TestNotifyHook(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := topo.New(t, topo.WithDirectors(3), topo.WithClientSources(0))
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	servers := serveEcho(t, echo.Config{TCP: []uint16{80}, HTTP: []uint16{8080}}, rs1, rs2)
	key := clusterKey(t)
	service := fmt.Sprintf("service: web\nvip: %s\nports: [80]\nforwarding: dr\nhealth:\n  interval: %s\n  timeout: 250ms\n"+
		"  rise: 2\n  fall: 2\n  checks: [{type: http, port: 8080, path: /healthz}]\nbackends:\n%s",
		vip, healthInterval, backendsYAML([]*topo.Host{rs1, rs2}))
	var ds []*lvsd
	for i, d := range tp.Directors() {
		l := newClusterDirector(t, tp, d, key, fmt.Sprintf("  priority: %d\n", 250-50*i))
		writeFile(t, filepath.Join(l.dir, "services.d", "web.yaml"), service)
		ds = append(ds, l)
	}
	startAll := func() {
		for _, l := range ds {
			l.start()
		}
		waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	}
	startAll()
	p := startProber(t, tp.Client(), netip.AddrPortFrom(vip, 80), 50*time.Millisecond)
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	without := measureGaps(t, tp, p, vip, "no hooks")

	// The hooks are read at start: restart with them.
	for _, l := range ds {
		l.stop()
	}
	for _, l := range ds {
		writeHook(t, l.hook(), fmt.Sprintf("env | grep '^LVSD_' | sort | tr '\\n' ' ' >> %s\necho >> %s", l.events(), l.events()))
		agentFile, err := os.ReadFile(l.config())
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, l.config(), string(agentFile)+fmt.Sprintf("hooks: {on_ownership: %s, on_health: %s, timeout: 2s}\n", l.hook(), l.hook()))
	}
	startAll()
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)

	// A health transition of rs1, seen by every director's checks.
	backend := rs1.V4.String()
	for _, l := range ds {
		waitFor(t, 10*time.Second, l.host.ID+"'s first health round of rs1", func() bool {
			return strings.Contains(l.log(), "target=web/"+backend+" healthy=true")
		})
	}
	servers["rs1"].SetHealthy(false)
	for _, l := range ds {
		waitFor(t, 10*time.Second, l.host.ID+"'s hook hearing rs1 unhealthy", func() bool {
			return len(l.hookEvents(t, "health")) == 1
		})
	}
	servers["rs1"].SetHealthy(true)
	for _, l := range ds {
		waitFor(t, 10*time.Second, l.host.ID+"'s hook hearing rs1 healthy", func() bool {
			return len(l.hookEvents(t, "health")) == 2
		})
		want := []string{"health unhealthy web/" + backend, "health healthy web/" + backend}
		if got := l.hookEvents(t, "health"); !slices.Equal(got, want) {
			t.Errorf("%s's health hook saw %q, want %q", l.host.ID, got, want)
		}
	}

	with := measureGaps(t, tp, p, vip, "recording hooks")
	taken, released := "ownership taken "+vip.String(), "ownership released "+vip.String()
	want := map[string][]string{"director": {taken}, tp.Director(2).ID: nil, tp.Director(3).ID: nil}
	for range gapReps {
		want["director"] = append(want["director"], released, taken)
		want[tp.Director(2).ID] = append(want[tp.Director(2).ID], taken, released)
	}
	for _, l := range ds {
		w := want[l.host.ID]
		waitFor(t, 10*time.Second, l.host.ID+"'s ownership hook runs", func() bool {
			return len(l.hookEvents(t, "ownership")) >= len(w)
		})
		time.Sleep(500 * time.Millisecond) // a duplicate would show up by now
		if got := l.hookEvents(t, "ownership"); !slices.Equal(got, w) {
			t.Errorf("%s's ownership hook saw %q, want %q", l.host.ID, got, w)
		}
	}

	// Hooks that hang: every run outlives the 2s timeout by far.
	for _, l := range ds {
		writeHook(t, l.hook(), "sleep 600 &\nsleep 600")
	}
	hanging := measureGaps(t, tp, p, vip, "hanging hooks")
	t.Logf("failover gaps (median of %d): no hooks %v, recording hooks %v, hanging hooks %v (runs killed after 2s)",
		gapReps, median(without), median(with), median(hanging))
	if m := median(hanging); m >= time.Second || m > median(without)+500*time.Millisecond {
		t.Errorf("with hanging hooks the median failover gap is %v; without hooks %v", m, median(without))
	}
	for _, l := range ds[:2] {
		if n := countLines(l.log(), "hook failed", "hook=ownership", "result=timeout"); n == 0 {
			t.Errorf("%s logged no hook run killed at the timeout", l.host.ID)
		}
	}
}

func (l *lvsd) hook() string   { return filepath.Join(l.dir, "notify") }
func (l *lvsd) events() string { return filepath.Join(l.dir, "events") }

// writeHook replaces the hook program at path by a shell script with body
// (renamed into place: a running one keeps its file).
func writeHook(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// hookEvents returns the events of kind the recording hook wrote, as
// "kind state subject" (subject: the VIP, or service/backend).
func (l *lvsd) hookEvents(t *testing.T, kind string) []string {
	t.Helper()
	data, err := os.ReadFile(l.events())
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		env := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if env["LVSD_EVENT"] != kind {
			continue
		}
		if env["LVSD_NODE"] != l.host.ID || env["LVSD_TIME"] == "" || env["LVSD_SEQ"] == "" {
			t.Errorf("%s's hook got %q", l.host.ID, line)
		}
		subject := env["LVSD_VIP"]
		if kind == "health" {
			subject = env["LVSD_SERVICE"] + "/" + env["LVSD_BACKEND"]
		}
		out = append(out, kind+" "+env["LVSD_STATE"]+" "+subject)
	}
	return out
}
