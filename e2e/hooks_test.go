//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// hookTimeout is the hooks' timeout in TestNotifyHook: longer than a cut
// and restore of measureGaps, so that a hanging hook still runs during the
// next takeover.
const hookTimeout = 20 * time.Second

// hookCuts is how many times each phase of TestNotifyHook cuts the owner.
const hookCuts = 2

// TestNotifyHook: three directors (priorities 250, 200, 150) share a VIP
// whose two backends are health-checked. Every director runs the same
// program as its on_ownership and on_health hook; it appends its
// environment to a file per hook.
//
//  1. With the recording hook, which returns at once: one backend fails
//     its checks and recovers; the owner's switch port is cut and restored
//     hookCuts times (measureGaps). Each director's hook sees exactly the
//     transitions its lvsd made, once each and in order: every VIP address
//     added (taken) or deleted (released), every health change of a
//     backend — including rs1's unhealthy and healthy, and the standby's
//     takeover and release in every cut.
//  2. The hook is replaced by one that sleeps far beyond the timeout: the
//     takeovers happen while the standby's hook hangs, each as fast as a
//     takeover with the recording hook, and the failover gap stays near
//     the gap of step 1; the hanging runs are killed at the timeout. A
//     takeover that waited for its hook would take up to the timeout.
func TestNotifyHook(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := topo.New(t, topo.WithDirectors(3), topo.WithClientSources(0))
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	servers := serveEcho(t, echo.Config{TCP: []uint16{80}, HTTP: []uint16{8080}}, rs1, rs2)
	key := clusterKey(t)
	service := fmt.Sprintf("service: web\nvip: %s\nports: [80]\nforwarding: dr\nhealth:\n  interval: 1s\n  timeout: 900ms\n"+
		"  rise: 2\n  fall: 2\n  checks: [{type: http, port: 8080, path: /healthz}]\nbackends:\n%s",
		vip, backendsYAML([]*topo.Host{rs1, rs2}))
	var ds []*lvsd
	for i, d := range tp.Directors() {
		l := newClusterDirector(t, tp, d, key, fmt.Sprintf("  priority: %d\n", 250-50*i))
		writeFile(t, filepath.Join(l.dir, "services.d", "web.yaml"), service)
		ds = append(ds, l)
	}
	marks := map[*lvsd]int{}
	for _, l := range ds {
		// A file per hook: the two hooks run side by side, and their
		// appends would interleave in one file.
		writeHook(t, l.hook(), fmt.Sprintf(`{ env; echo --; } >> "%s-$LVSD_EVENT"`, l.events()))
		agentFile, err := os.ReadFile(l.config())
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, l.config(), string(agentFile)+fmt.Sprintf("hooks: {on_ownership: %s, on_health: %s, timeout: %s}\n",
			l.hook(), l.hook(), hookTimeout))
		marks[l] = l.logSize()
	}
	for _, l := range ds {
		l.start()
	}
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	p := startProber(t, tp.Client(), netip.AddrPortFrom(vip, 80), 50*time.Millisecond)
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)

	// A health transition of rs1, seen by every director's checks.
	rs1Key := "web/" + rs1.V4.String()
	for _, l := range ds {
		l.waitLog(marks[l], 20*time.Second, "target="+rs1Key+" healthy=true")
	}
	servers["rs1"].SetHealthy(false)
	for _, l := range ds {
		l.waitLog(marks[l], 20*time.Second, `msg="target unhealthy"`, "target="+rs1Key+" ")
	}
	servers["rs1"].SetHealthy(true)
	for _, l := range ds {
		l.waitLog(marks[l], 20*time.Second, `msg="target unhealthy"`, "target="+rs1Key+" ") // still there: the mark is the start
	}
	with := measureGapsN(t, tp, p, vip, "recording hooks", hookCuts)
	standby := ds[1]
	for _, l := range ds {
		// The cut director's checks may still be recovering, and each
		// hook runs after its log line: compare until both agree, and
		// once more a second later, when a duplicate would show.
		var got, want []string
		agree := func() bool {
			log := l.logSince(marks[l])
			want = append(healthTransitions(log), addressMoves(log, vip)...)
			got = l.hookEvents(t)
			return slices.Equal(sortedByKind(got), sortedByKind(want))
		}
		settled := eventually(2*hookTimeout, agree)
		time.Sleep(time.Second)
		if !settled || !eventually(10*time.Second, agree) {
			t.Errorf("%s's hook saw\n%q\nits lvsd made\n%q", l.host.ID, got, want)
		}
		if !slices.Contains(got, "health unhealthy "+rs1Key) || !slices.Contains(got, "health healthy "+rs1Key) {
			t.Errorf("%s's hook did not see rs1 fail and recover: %q", l.host.ID, got)
		}
		t.Logf("%s's hook saw %d events: %q", l.host.ID, len(got), got)
	}
	if n := count(standby.hookEvents(t), "ownership taken "+vip.String()); n < hookCuts {
		t.Errorf("the standby's hook saw %d takeovers in %d cuts", n, hookCuts)
	}

	// Hooks that hang: every run lasts until the timeout kills it.
	for _, l := range ds {
		writeHook(t, l.hook(), "sleep 600 &\nsleep 600")
	}
	hangMark := standby.logSize()
	hanging := measureGapsN(t, tp, p, vip, "hanging hooks", hookCuts)
	quick, hung := takeoverTimes(standby.log()[marks[standby]:hangMark], vip), takeoverTimes(standby.logSince(hangMark), vip)
	t.Logf("the standby's takeovers, from deciding to the address added: recording hooks %v, hanging hooks %v", quick, hung)
	if len(hung) < hookCuts || slices.Max(hung) > slices.Max(quick)+500*time.Millisecond {
		t.Errorf("the standby's takeovers with a hanging hook took %v; with a recording hook %v", hung, quick)
	}
	t.Logf("failover gaps (median of %d): recording hooks %v, hanging hooks (timeout %v) %v",
		hookCuts, median(with), hookTimeout, median(hanging))
	// The gaps are measured on a loaded VM: this catches a takeover that
	// waits for a hook (which would add up to the timeout), not noise.
	if m := median(hanging); m > 2*median(with)+time.Second {
		t.Errorf("with hanging hooks the median failover gap is %v; with recording hooks %v", m, median(with))
	}
	standby.waitLog(marks[standby], 2*hookTimeout, "hook failed", "hook=ownership", "result=timeout")
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

// hookEvents returns the events the recording hook wrote, as "kind state
// subject" (subject: the VIP, or service/backend): the ownership events in
// the order they ran, then the health events.
func (l *lvsd) hookEvents(t *testing.T) []string {
	t.Helper()
	var data []byte
	for _, kind := range []string{"ownership", "health"} {
		b, err := os.ReadFile(l.events() + "-" + kind)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	var out []string
	for _, block := range strings.Split(string(data), "--\n") {
		env := map[string]string{}
		for _, kv := range strings.Split(block, "\n") {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "LVSD_") {
				env[k] = v
			}
		}
		if len(env) == 0 {
			continue
		}
		if env["LVSD_NODE"] != l.host.ID || env["LVSD_TIME"] == "" || env["LVSD_SEQ"] == "" {
			t.Errorf("%s's hook got %q", l.host.ID, env)
		}
		subject := env["LVSD_VIP"]
		if env["LVSD_EVENT"] == "health" {
			subject = env["LVSD_SERVICE"] + "/" + env["LVSD_BACKEND"]
		}
		out = append(out, env["LVSD_EVENT"]+" "+env["LVSD_STATE"]+" "+subject)
	}
	return out
}

// healthTransitions are the health changes lvsd logged, as hookEvents
// names them: a target starts healthy, so "target healthy" after a
// healthy state (the first rounds) is no transition.
func healthTransitions(log string) []string {
	unhealthy := map[string]bool{}
	var out []string
	for _, line := range strings.Split(log, "\n") {
		down := strings.Contains(line, `msg="target unhealthy"`)
		if !down && !strings.Contains(line, `msg="target healthy"`) {
			continue
		}
		target := field(logTarget, line)
		if unhealthy[target] == down {
			continue
		}
		unhealthy[target] = down
		out = append(out, map[bool]string{true: "health unhealthy ", false: "health healthy "}[down]+target)
	}
	return out
}

// addressMoves are the additions and deletions of vip's address lvsd
// logged, as hookEvents names them.
func addressMoves(log string, vip netip.Addr) []string {
	var out []string
	prefix := netip.PrefixFrom(vip, vip.BitLen()).String()
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.Contains(line, "op=add-address") && strings.Contains(line, `object="add-address `+prefix+" "):
			out = append(out, "ownership taken "+vip.String())
		case strings.Contains(line, "op=delete-address") && strings.Contains(line, `object="delete-address `+prefix+" "):
			out = append(out, "ownership released "+vip.String())
		}
	}
	return out
}

var logTarget = regexp.MustCompile(`\btarget=(\S+)`)

// takeoverTimes returns, for every "taking VIP" of vip in log, the time
// until its address was added.
func takeoverTimes(log string, vip netip.Addr) []time.Duration {
	var out []time.Duration
	var taking time.Time
	prefix := netip.PrefixFrom(vip, vip.BitLen()).String()
	for _, line := range strings.Split(log, "\n") {
		at, ok := lineTime(line)
		switch {
		case !ok:
		case strings.Contains(line, `msg="taking VIP"`) && strings.Contains(line, " vip="+vip.String()+" "):
			taking = at
		case !taking.IsZero() && strings.Contains(line, `object="add-address `+prefix+" "):
			out = append(out, at.Sub(taking))
			taking = time.Time{}
		}
	}
	return out
}

// sortedByKind keeps the order within each kind (a hook per kind runs in
// order; the two kinds run side by side).
func sortedByKind(events []string) []string {
	out := slices.Clone(events)
	slices.SortStableFunc(out, func(a, b string) int {
		ka, _, _ := strings.Cut(a, " ")
		kb, _, _ := strings.Cut(b, " ")
		return strings.Compare(ka, kb)
	})
	return out
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
