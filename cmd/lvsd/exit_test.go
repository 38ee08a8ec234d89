package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The exit status tells a wrong command line (2) and a stopped agent (3)
// from a failure (1).
func TestExitCodes(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"version"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"status", "-h"}, 0},
		{nil, exitUsage},
		{[]string{"nosuch"}, exitUsage},
		{[]string{"status", "--bogus"}, exitUsage},
		{[]string{"explain", "192.0.2.7"}, exitUsage},
		{[]string{"explain", "192.0.2.7", "10.0.0.50"}, exitUsage},
		{[]string{"status", "--socket", none}, exitNotRunning},
		{[]string{"explain", "--socket", none, "192.0.2.7", "10.0.0.50:80"}, exitNotRunning},
		{[]string{"status", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, exitFailure},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if got := exitCode(err); got != tc.want {
			t.Errorf("lvsd %s: exit %d (%v), want %d", strings.Join(tc.args, " "), got, err, tc.want)
		}
	}
	if exitCode(errors.New("boom")) != exitFailure {
		t.Error("a plain error is not exit 1")
	}
}

// --version and -V print what lvsd version prints: version, commit and Go.
func TestVersionFlags(t *testing.T) {
	var want bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &want, &want); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(want.String(), "lvsd "+version+" (commit ") || !strings.Contains(want.String(), runtime.Version()) {
		t.Errorf("lvsd version: %q", want.String())
	}
	for _, flag := range []string{"--version", "-V"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{flag}, &out, &out); err != nil || out.String() != want.String() {
			t.Errorf("lvsd %s: %q, %v; want %q", flag, out.String(), err, want.String())
		}
	}
}
