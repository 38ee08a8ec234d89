package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
)

// The bench's services load as lvsd loads them, with and without health
// checks: a typo in the generated YAML would fail only in the VM.
func TestGeneratedServicesLoad(t *testing.T) {
	for _, tc := range []struct {
		health string
		checks int // health targets
	}{{"", 0}, {"tcp", 3 * 4}} {
		t.Run("health "+tc.health, func(t *testing.T) {
			healthType, healthInterval = tc.health, time.Minute
			defer func() { healthType = "" }()
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "services.d"), 0o755)
			files, _ := generate(vip, "", 3, []string{"10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"})
			for name, body := range files {
				if err := os.WriteFile(filepath.Join(dir, "services.d", name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			agentFile := filepath.Join(dir, "lvsd.yaml")
			os.WriteFile(agentFile, []byte(fmt.Sprintf("node: bench\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\napi: {socket: %s}\n",
				filepath.Join(dir, "lvsd.sock"))), 0o644)
			cfg, err := agent.LoadConfig(agentFile)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(agent.HealthTargets(cfg.Services)); got != tc.checks {
				t.Errorf("%d health targets, want %d", got, tc.checks)
			}
		})
	}
}

// A director's agent file and services under -ecmp, DR or FULLNAT, load
// as lvsd loads them.
func TestECMPAgentFileLoads(t *testing.T) {
	for _, fullnat := range []bool{false, true} {
		t.Run(fmt.Sprint("fullnat=", fullnat), func(t *testing.T) {
			fullNAT = fullnat
			defer func() { fullNAT = false }()
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "services.d"), 0o755)
			files, _ := generate(ecmpVIP, forwarding([]string{"director", "director2", "director3"}), 3, []string{"10.0.0.11", "10.0.0.12"})
			for name, body := range files {
				if err := os.WriteFile(filepath.Join(dir, "services.d", name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			os.WriteFile(filepath.Join(dir, "cluster.key"), []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"), 0o600)
			agentFile := filepath.Join(dir, "lvsd.yaml")
			os.WriteFile(agentFile, []byte(ecmpAgentFile("director2", "eth0", filepath.Join(dir, "lvsd.sock"), "10.0.0.3",
				[]string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}, "10.0.0.10")), 0o644)
			cfg, err := agent.LoadConfig(agentFile)
			if err != nil {
				t.Fatal(err)
			}
			if c := cfg.Agent.Cluster; c == nil || c.Mode != "ecmp" {
				t.Errorf("cluster %+v, want mode ecmp", c)
			}
			if len(cfg.Services) != 3 {
				t.Fatalf("%d services, want 3", len(cfg.Services))
			}
			want := "dr"
			if fullnat {
				want = "fullnat"
			}
			if got := string(cfg.Services[0].Forwarding); got != want {
				t.Errorf("forwarding %q, want %q", got, want)
			}
		})
	}
}

// The interval the bench picks keeps the checks it asks of the VM within
// vmChecksPerSecond, never under a minute; -health-interval overrides it.
func TestCheckInterval(t *testing.T) {
	for _, tc := range []struct {
		targets int
		flag    time.Duration
		want    time.Duration
	}{
		{10, 0, time.Minute},
		{1_000 * 10, 0, 100 * time.Second},
		{10_000 * 10, 0, 1000 * time.Second},
		{3 * 10_000 * 10, 0, 3000 * time.Second},
		{10_000 * 10, time.Minute, time.Minute},
	} {
		healthIntervalFlag = tc.flag
		got := pickInterval(tc.targets)
		healthIntervalFlag = 0
		if got != tc.want {
			t.Errorf("%d targets, -health-interval %v: %v, want %v", tc.targets, tc.flag, got, tc.want)
		}
		if healthInterval = got; tc.flag == 0 && checksAsked(tc.targets) > vmChecksPerSecond {
			t.Errorf("%d targets every %v ask %.0f checks/s", tc.targets, got, checksAsked(tc.targets))
		}
	}
}

// A log line's time is read from its time= field; a line without one has
// none.
func TestLoggedAt(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string
	}{
		{`time=2026-12-05T22:52:52.151Z level=INFO msg="target healthy" target=svc0/10.0.0.11`, "2026-12-05T22:52:52.151Z"},
		{`level=INFO msg=reconciled`, ""},
		{`time=yesterday level=INFO`, ""},
	} {
		at, ok := loggedAt(tc.line)
		if got := ""; ok {
			got = at.Format(time.RFC3339Nano)
			if got != tc.want {
				t.Errorf("%q: %s, want %s", tc.line, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%q: no time, want %s", tc.line, tc.want)
		}
	}
}
