package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/views"
)

func TestBackendCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // in the usage error
	}{
		{nil, "usage: lvsd backend drain SERVICE BACKEND"},
		{[]string{"drain", "web"}, "usage: lvsd backend drain"},
		{[]string{"weight", "web", "10.0.0.11"}, "backend weight: missing N (usage: lvsd backend weight SERVICE BACKEND N"},
		{[]string{"weight", "web", "10.0.0.11", "heavy"}, `weight "heavy" is not a whole number`},
		{[]string{"maint", "web", "10.0.0.11"}, "unknown action \"maint\"\nusage: lvsd backend drain"},
		{[]string{"list", "extra"}, `backend list: unexpected argument "extra"`},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"backend", "--socket", "/nonexistent.sock"}, c.args...), &out, &errOut)
		var u usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
}

func TestWriteBackends(t *testing.T) {
	seven := 7
	drained := views.BackendState{BackendOverride: planner.BackendOverride{Service: "web", Backend: "10.0.0.11", Drained: true,
		DrainedAt: statusNow.Add(-90 * time.Second)}, ConfiguredWeight: 100,
		Kernel: []views.KernelWeight{{IPVSService: "tcp:10.0.0.50:80", Destination: "10.0.0.11:80", Weight: 0},
			{IPVSService: "tcp:10.0.0.50:443", Destination: "10.0.0.11:443", Weight: 0}}}
	weighted := views.BackendState{BackendOverride: planner.BackendOverride{Service: "web", Backend: "10.0.0.12:8080",
		Weight: &seven, WeightAt: statusNow.Add(-time.Hour)}, ConfiguredWeight: 100,
		Kernel: []views.KernelWeight{{IPVSService: "tcp:10.0.0.50:80", Destination: "10.0.0.12:8080", Weight: 7}}}
	cleared := views.BackendState{BackendOverride: planner.BackendOverride{Service: "web", Backend: "10.0.0.11"}, ConfiguredWeight: 100,
		Kernel: []views.KernelWeight{{IPVSService: "tcp:10.0.0.50:80", Destination: "10.0.0.11:80", Weight: 100}}}

	var b bytes.Buffer
	writeBackends(&b, []views.BackendState{drained, weighted}, statusNow)
	want := `SERVICE  BACKEND         OVERRIDE                 CONFIGURED  KERNEL
web      10.0.0.11       drained 1m30s ago        100         0 0
web      10.0.0.12:8080  weight 7 set 1h0m0s ago  100         7
`
	if got := b.String(); got != want {
		t.Errorf("list:\n%s\nwant:\n%s", got, want)
	}
	b.Reset()
	writeBackends(&b, nil, statusNow)
	if got := b.String(); got != "no backend overrides: every backend runs as its service file says\n" {
		t.Errorf("empty list: %q", got)
	}
	for _, c := range []struct {
		st   views.BackendState
		want string
	}{
		{drained, "web 10.0.0.11: drained since 2025-06-01 11:58:40 (1m30s ago), the file's weight 100\n" +
			"  TCP  10.0.0.50:80 -> 10.0.0.11:80  weight 0 in the kernel\n  TCP  10.0.0.50:443 -> 10.0.0.11:443  weight 0 in the kernel\n"},
		{weighted, "web 10.0.0.12:8080: in service, weight 7 set 1h0m0s ago (the file says 100)\n" +
			"  TCP  10.0.0.50:80 -> 10.0.0.12:8080  weight 7 in the kernel\n"},
		{cleared, "web 10.0.0.11: in service, the file's weight 100 (no override left)\n" +
			"  TCP  10.0.0.50:80 -> 10.0.0.11:80  weight 100 in the kernel\n"},
	} {
		b.Reset()
		writeBackendState(&b, c.st, statusNow)
		if got := b.String(); got != c.want {
			t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
		}
	}
}

func TestDestinationStateOverride(t *testing.T) {
	seven := 7
	for _, c := range []struct {
		d    views.DestinationStatus
		want string
	}{
		{views.DestinationStatus{ConfiguredWeight: 100, Weight: 0, Override: &planner.BackendOverride{Drained: true,
			DrainedAt: statusNow.Add(-time.Minute)}}, "drained 1m0s ago (lvsd backend)"},
		{views.DestinationStatus{ConfiguredWeight: 100, Weight: 7, Override: &planner.BackendOverride{Weight: &seven,
			WeightAt: statusNow.Add(-time.Minute)}}, "weight 7 set 1m0s ago (lvsd backend)"},
		{views.DestinationStatus{ConfiguredWeight: 100, Weight: 0, Health: "unhealthy", Override: &planner.BackendOverride{Drained: true,
			DrainedAt: statusNow}}, "UNHEALTHY, drained 0s ago (lvsd backend)"},
	} {
		if got := destinationState(c.d, statusNow); got != c.want {
			t.Errorf("%+v: %q, want %q", c.d, got, c.want)
		}
	}
}

func TestBackendOnARealServer(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "lvsd.yaml")
	if err := os.WriteFile(cfg, []byte("role: realserver\nrealserver: {vips: [10.0.0.50]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"backend", "--config", cfg, "drain", "web", "10.0.0.11"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "this host's role is realserver") {
		t.Errorf("lvsd backend on a real server: %v", err)
	}
}
