package views

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/histogram"
	"github.com/lvsd/lvsd/ipvs/l4"
)

const checkedWeb = "service: web\nvip: 10.0.0.50\nports: [80]\nhealth: {checks: [{type: tcp}]}\nbackends:\n" +
	"  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n  - {address: 10.0.0.13}\n"

// checkedWebStates are the checker's states of checkedWeb's backends: the
// first has none yet (the checker has not been handed it), the second
// passes, the third fails; both carry the service's round durations.
func checkedWebStates() map[string]health.State {
	var rounds histogram.Durations
	rounds.Observe(3 * time.Millisecond)
	rounds.Observe(40 * time.Millisecond)
	return map[string]health.State{
		"web/10.0.0.12": {Known: true, Healthy: true, Weight: health.NoWeight, Rounds: 2, Durations: rounds},
		"web/10.0.0.13": {Known: true, Healthy: false, Weight: health.NoWeight, Rounds: 2, FailedRounds: 1,
			LastError: "tcp: connection refused", Durations: rounds},
	}
}

// The service's histogram of round durations is the same with the series
// per backend and without, though the first checked backend has no state:
// without them it is read from the first backend the checker has.
func TestHealthDurationsWithoutPerBackend(t *testing.T) {
	var got []string
	for _, perBackend := range []bool{true, false} {
		e := newEnv(t)
		writeTestFile(t, filepath.Join(e.dir, "lvsd.yaml"), fmt.Sprintf("node: d1\ninterface: eth0\n"+
			"services_dir: services.d\nstate_dir: state\nmetrics: {per_backend: %v}\n", perBackend))
		e.service("web", checkedWeb)
		a := e.agentWith(agent.Options{Health: &fakeHealth{states: checkedWebStates()}})
		e.reconcile(a)
		reg := NewCollector(a, "dev")
		if n := testutil.CollectAndCount(reg, "lvsd_health_check_duration_seconds"); n != 1 {
			t.Fatalf("per_backend %v: %d histograms, want 1", perBackend, n)
		}
		text, err := gatherText(reg, "lvsd_health_check_duration_seconds")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text, `lvsd_health_check_duration_seconds_count{service="web"} 2`) {
			t.Errorf("per_backend %v: want 2 rounds counted:\n%s", perBackend, text)
		}
		got = append(got, text)
	}
	if got[0] != got[1] {
		t.Errorf("per backend:\n%s\nwithout:\n%s", got[0], got[1])
	}
}

// Explain says each destination's health as the status does: pending
// before the checker has it, healthy, unhealthy with why.
func TestExplainHealth(t *testing.T) {
	e := newEnv(t)
	e.service("web", checkedWeb)
	a := e.agentWith(agent.Options{Health: &fakeHealth{states: checkedWebStates()}})
	e.reconcile(a)
	x, err := a.Explain(context.Background(), ExplainQuery{Client: netip.MustParseAddrPort("192.0.2.7:40000"),
		Virtual: netip.MustParseAddrPort("10.0.0.50:80"), Protocol: l4.TCP})
	if err != nil {
		t.Fatal(err)
	}
	var health []string
	for _, d := range x.Destinations {
		health = append(health, fmt.Sprintf("%s %s %q", d.Address, d.Health, d.HealthError))
	}
	slices.Sort(health)
	want := []string{`10.0.0.11:80 pending ""`, `10.0.0.12:80 healthy ""`, `10.0.0.13:80 unhealthy "tcp: connection refused"`}
	if !slices.Equal(health, want) {
		t.Errorf("explained destinations:\n got %q\nwant %q", health, want)
	}
}

// gatherText renders the family name of c's series as text.
func gatherText(c prometheus.Collector, name string) (string, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return "", err
	}
	families, err := reg.Gather()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range families {
		if f.GetName() == name {
			if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
				return "", err
			}
		}
	}
	return b.String(), nil
}
