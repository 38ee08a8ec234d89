package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lvsd import: flags after the arguments, files written into --out (never
// over an existing one), the report on stdout; without --out the files on
// stdout and the report on stderr; a wrong command line is exit 2.
func TestImportCommand(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(conf, []byte("virtual_server 10.0.0.1 80 {\n  lb_kind DR\n  real_server 10.1.0.1 80 {\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pair := filepath.Join(dir, "pair.conf")
	if err := os.WriteFile(pair, []byte("vrrp_instance VI {\n  interface eth1\n  virtual_router_id 51\n  priority 150\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ipvsText := filepath.Join(dir, "ipvs.txt")
	if err := os.WriteFile(ipvsText, []byte("-A -t 10.0.0.2:80 -s rr\n-a -t 10.0.0.2:80 -r 10.1.0.2:80 -g -w 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"import", "keepalived", conf, "--out", out}, 0, "k", ""},
		{[]string{"import", "keepalived", conf, "--out", out}, exitFailure, "", ""},
		{[]string{"import", "keepalived", conf, "--scheduler", "mh"}, 0, "scheduler: mh", "keepalived.conf:1: virtual_server: mapped"},
		{[]string{"import", "keepalived", pair, "--cluster", "vrrp"}, 0, "    virtual_router_id: 51", "pair.conf:4: priority: mapped: cluster.vrrp.priority: 150"},
		{[]string{"import", "keepalived", pair}, 0, "  mode: active-standby", "pair.conf:4: priority: mapped: cluster.priority: 150"},
		{[]string{"import", "keepalived", pair, "--cluster", "ecmp"}, exitUsage, "", ""},
		{[]string{"import", "ipvsadm", ipvsText}, 0, "  - {address: 10.1.0.2, weight: 2}", "ipvs.txt:2: tcp:10.0.0.2:80 -r 10.1.0.2:80: mapped"},
		{[]string{"import", "keepalived"}, exitUsage, "", ""},
		{[]string{"import", "haproxy", conf}, exitUsage, "", ""},
		{[]string{"import", "keepalived", conf, "--scheduler", "rr"}, exitUsage, "", ""},
		{[]string{"import", "ipvsadm", ipvsText, "--scheduler", "mh"}, exitUsage, "", ""},
		{[]string{"import", "keepalived", filepath.Join(dir, "missing.conf")}, exitFailure, "", ""},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		if got := exitCode(err); got != tc.code {
			t.Errorf("lvsd %s: exit %d (%v), want %d", strings.Join(tc.args, " "), got, err, tc.code)
		}
		if !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("lvsd %s: stdout\n%s\nstderr\n%s\nwant %q and %q in them", strings.Join(tc.args, " "), stdout.String(), stderr.String(), tc.stdout, tc.stderr)
		}
	}
	for _, f := range []string{"lvsd.yaml", "services.d/10.0.0.1-80.yaml"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("--out: %v", err)
		}
	}
}
