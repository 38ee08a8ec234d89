package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHooks(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "notify")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, block string
		want        *Hooks
		err         string
	}{
		{"none", "", nil, ""},
		{"both", "hooks: {on_ownership: " + prog + ", on_health: " + prog + ", timeout: 2s}\n",
			&Hooks{OnOwnership: prog, OnHealth: prog, Timeout: 2 * time.Second}, ""},
		{"default timeout", "hooks: {on_health: " + prog + "}\n", &Hooks{OnHealth: prog, Timeout: 10 * time.Second}, ""},
		{"relative", "hooks: {on_ownership: notify}\n", nil, `lvsd.yaml:3:23: on_ownership: "notify" is not an absolute path`},
		{"not executable", "hooks: {on_health: " + plain + "}\n", nil, "lvsd.yaml:3:20: on_health: " + plain + " is not executable"},
		{"missing", "hooks: {on_health: " + prog + "x}\n", nil, "no such file or directory"},
		{"timeout", "hooks: {on_health: " + prog + ", timeout: 1h}\n", nil, `hooks timeout "1h" is not a duration from 100ms to 10m0s`},
		{"empty", "hooks: {timeout: 1s}\n", nil, "lvsd.yaml:3:9: a hooks block names no program"},
		{"unknown key", "hooks: {on_change: " + prog + "}\n", nil, "on_change"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "lvsd.yaml", "node: d1\ninterface: eth0\n"+c.block+"strict_modes: false\n")
			a, err := LoadAgent(p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (a.Hooks == nil) != (c.want == nil) || a.Hooks != nil && *a.Hooks != *c.want {
				t.Errorf("Hooks %+v, want %+v", a.Hooks, c.want)
			}
		})
	}
}

func TestHooksAreForDirectors(t *testing.T) {
	p := writeFile(t, t.TempDir(), "lvsd.yaml", "node: r1\nrole: realserver\nrealserver: {vips: [203.0.113.10]}\nhooks: {on_health: /bin/true}\n")
	if _, err := LoadAgent(p); err == nil || !strings.Contains(err.Error(), "hooks are for role director") {
		t.Fatalf("error %v", err)
	}
}
