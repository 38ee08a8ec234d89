package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// cliConfig writes a director's agent file with one service, web on
// 10.0.0.50:80 with backends 10.0.0.11 and 10.0.0.12, and returns its
// path and the socket it names.
func cliConfig(t *testing.T) (config, socket string) {
	t.Helper()
	dir := t.TempDir()
	socket = filepath.Join(dir, "agent.sock")
	files := map[string]string{
		"lvsd.yaml": "role: director\ninterface: lo\nservices_dir: services.d\nstate_dir: state\n" +
			"api:\n  socket: " + socket + "\nmetrics:\n  listen: \"off\"\n",
		"services.d/web.yaml": "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n",
		"bad/lvsd.yaml":       "role: director\ninterface: lo\nservices_dir: services.d\nstate_dir: state\nbogus: 1\n",
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "lvsd.yaml"), socket
}

// fakeHost makes plan read the kernel packages' fakes instead of the host,
// and returns them, empty.
func fakeHost(t *testing.T) agent.Kernel {
	t.Helper()
	ipvsFake := ipvs.NewFake()
	// The kernel parameters lvsd may set, as a host with ip_vs loaded has them.
	sysctls := sysctl.NewFake(map[string]string{
		"net/ipv4/ip_forward": "0", "net/ipv6/conf/all/forwarding": "0",
		"net/ipv4/vs/conntrack": "0", "net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
	})
	k := agent.Kernel{IPVS: ipvsFake, Daemons: ipvsFake, Timeouts: ipvsFake, NAT: nat.NewFake(), Sysctls: sysctls,
		Addrs: arp.NewFake("lo")}
	saved := planKernel
	planKernel = func() (agent.Kernel, error) { return k, nil }
	t.Cleanup(func() { planKernel = saved })
	return k
}

type cliCase struct {
	args   []string
	code   int
	stdout string // in stdout
	stderr string // in stderr
}

func runCases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		if got := exitCode(err); got != tc.code {
			t.Errorf("lvsd %s: exit %d (%v), want %d\nstderr: %s", strings.Join(tc.args, " "), got, err, tc.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("lvsd %s: stdout\n%s\nstderr\n%s\nwant %q and %q in them", strings.Join(tc.args, " "),
				stdout.String(), stderr.String(), tc.stdout, tc.stderr)
		}
	}
}

// TestCommandLine is the command line's contract: flags before or after
// the arguments, -config as Go's flag package took it, --config honoured by
// every command, a wrong number of arguments or an unknown flag refused
// with exit 2.
func TestCommandLine(t *testing.T) {
	config, socket := cliConfig(t)
	bad := filepath.Join(filepath.Dir(config), "bad", "lvsd.yaml")
	fakeHost(t)
	ok := config + ": ok (role director, 1 services, 1 IPVS services)"
	notRunning := "no lvsd agent is answering on " + socket
	key := filepath.Join(filepath.Dir(config), "identity.key")
	runCases(t, []cliCase{
		{args: []string{"check", "--config", config}, stdout: ok},
		{args: []string{"--config", config, "check"}, stdout: ok},
		{args: []string{"check", "--config=" + config}, stdout: ok},
		{args: []string{"check", "-config", config}, stdout: ok},
		{args: []string{"-config=" + config, "check"}, stdout: ok},
		{args: []string{"check", "--config", bad}, code: exitFailure, stderr: `unknown key "bogus"`},
		{args: []string{"check", "--config", config, "extra"}, code: exitUsage, stderr: `check: unexpected argument "extra"`},
		{args: []string{"check", "--bogus"}, code: exitUsage, stderr: "unknown flag: --bogus"},
		{args: []string{"plan", "--config", config}, stdout: "add-service"},
		{args: []string{"plan", "--takeover", "--config", config, "now"}, code: exitUsage, stderr: `plan: unexpected argument "now"`},
		{args: []string{"status", "--config", config}, code: exitNotRunning, stderr: notRunning},
		{args: []string{"status", "--config", config, "--json", "web"}, code: exitUsage, stderr: `unexpected argument "web"`},
		{args: []string{"explain", "192.0.2.7", "10.0.0.50:80", "--config", config, "--json"}, code: exitNotRunning, stderr: notRunning},
		{args: []string{"explain", "--json", "192.0.2.7", "--config", config, "10.0.0.50:80"}, code: exitNotRunning, stderr: notRunning},
		{args: []string{"explain", "192.0.2.7", "--json"}, code: exitUsage, stderr: "explain: missing VIP:PORT[/PROTO]"},
		{args: []string{"explain", "192.0.2.7", "10.0.0.50:80", "extra"}, code: exitUsage, stderr: `unexpected argument "extra"`},
		{args: []string{"backend", "list", "--config", config}, code: exitNotRunning, stderr: notRunning},
		{args: []string{"backend", "--config", config, "list", "--json"}, code: exitNotRunning, stderr: notRunning},
		{args: []string{"backend", "drain", "web", "10.0.0.11", "--config", config}, code: exitNotRunning, stderr: notRunning},
		{args: []string{"backend", "weight", "web", "10.0.0.11", "--json", "7", "--config", config}, code: exitNotRunning, stderr: notRunning},
		{args: []string{"backend", "drain", "web", "--config", config}, code: exitUsage, stderr: "backend drain: missing BACKEND"},
		{args: []string{"drain", "--config", config}, code: exitFailure, stderr: config + " has no bgp block"},
		{args: []string{"undrain", "--config", config, "now"}, code: exitUsage, stderr: `undrain: unexpected argument "now"`},
		{args: []string{"cleanup", "--config", config}, stdout: "nothing to clean up: no TOA program is pinned"},
		{args: []string{"run", "--config", config, "extra"}, code: exitUsage},
		{args: []string{"reload", "--config", config}, code: exitNotRunning, stderr: notRunning},
		{args: []string{"reload", "now", "--config", config}, code: exitUsage, stderr: `reload: unexpected argument "now"`},
		{args: []string{"restart-hold", "--config", config, "--for", "10s"}, code: exitFailure, stderr: "restart-hold is for a director in a cluster"},
		{args: []string{"restart-hold", "now", "--config", config}, code: exitUsage, stderr: `restart-hold: unexpected argument "now"`},
		{args: []string{"keygen", "--out", key}, stdout: "="},
		{args: []string{"keygen", key}, code: exitUsage, stderr: "keygen: unexpected argument"},
		{args: []string{"man", "8", "--config", config}, stdout: ".TH LVSD 8"},
		{args: []string{"man", "5", "8"}, code: exitUsage},
		{args: []string{"completion", "fish", "--config", config}, stdout: "__complete"},
		{args: []string{"completion"}, code: exitUsage, stderr: "completion: missing bash|zsh|fish"},
		{args: []string{"completion", "tcsh"}, code: exitUsage, stderr: `no completion for shell "tcsh"`},
		{args: []string{"version", "extra"}, code: exitUsage},
		{args: []string{"explain", "192.0.2.7", "10.0.0.50:80", "--help"}, stdout: "lvsd explain CLIENT[:PORT] VIP:PORT[/PROTO] [flags]"},
		{args: []string{"backend", "weight", "-h"}, stdout: "lvsd backend weight SERVICE BACKEND N [flags]"},
		{args: []string{"stauts"}, code: exitUsage, stderr: "did you mean status?"},
	})
	var pub bytes.Buffer
	if err := run(context.Background(), []string{"keygen", "--public", key}, &pub, &pub); err != nil || !strings.HasSuffix(pub.String(), "=\n") {
		t.Errorf("keygen --public: %q, %v", pub.String(), err)
	}
}

// check --json is versioned, and says where a rejected file is wrong.
func TestCheckJSON(t *testing.T) {
	config, _ := cliConfig(t)
	bad := filepath.Join(filepath.Dir(config), "bad", "lvsd.yaml")
	for _, tc := range []struct {
		config string
		code   int
		want   checkResult
	}{
		{config, 0, checkResult{Schema: 1, Config: config, OK: true, Role: "director", Services: 1, IPVSServices: 1,
			Errors: []checkError{}, Warnings: []checkNotice{}}},
		{bad, exitFailure, checkResult{Schema: 1, Config: bad, Errors: []checkError{{File: bad, Line: 5, Column: 1,
			Message: `unknown key "bogus"`}}, Warnings: []checkNotice{}}},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"check", "--json", "--config", tc.config}, &stdout, &stderr)
		if exitCode(err) != tc.code {
			t.Errorf("%s: exit %d (%v), want %d", tc.config, exitCode(err), err, tc.code)
		}
		var got checkResult
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v\n%s", tc.config, err, stdout.String())
		}
		for i := range got.Errors { // the message goes on to list the known keys
			got.Errors[i].Message, _, _ = strings.Cut(got.Errors[i].Message, " (")
		}
		if g, w := mustJSON(t, got), mustJSON(t, tc.want); g != w {
			t.Errorf("%s:\ngot  %s\nwant %s", tc.config, g, w)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// plan --json lists the ops; --detailed-exitcode is 2 while there are
// changes and 0 once the host matches.
func TestPlanJSONAndDetailedExitCode(t *testing.T) {
	config, _ := cliConfig(t)
	k := fakeHost(t)
	planJSON := func(args ...string) (planResult, int) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"plan", "--config", config, "--json"}, args...), &stdout, &stderr)
		var r planResult
		if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
			t.Fatalf("%v (%v)\n%s%s", jerr, err, stdout.String(), stderr.String())
		}
		return r, exitCode(err)
	}
	r, code := planJSON("--detailed-exitcode")
	if code != exitPending || r.Schema != 1 || r.Config != config || len(r.Changes) == 0 {
		t.Fatalf("before: exit %d, %+v; want exit 2 and changes", code, r)
	}
	if _, code := planJSON(); code != 0 {
		t.Errorf("without --detailed-exitcode: exit %d, want 0", code)
	}
	var kinds []string
	for _, c := range r.Changes {
		if c.Op == "" || c.Change == "" {
			t.Errorf("a change without op or text: %+v", c)
		}
		kinds = append(kinds, c.Op)
	}
	if !slices.Contains(kinds, "add-service") || !slices.Contains(kinds, "add-destination") {
		t.Errorf("ops %q: want add-service and add-destination", kinds)
	}

	cfg, err := agent.LoadConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := agent.PlanFor(context.Background(), cfg, k, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(k.Apply(context.Background(), ops)...); err != nil {
		t.Fatal(err)
	}
	r, code = planJSON("--detailed-exitcode")
	if code != 0 || len(r.Changes) != 0 {
		t.Errorf("after applying the plan: exit %d, %+v; want 0 and no changes", code, r.Changes)
	}
	runCases(t, []cliCase{{args: []string{"plan", "--detailed-exitcode", "--config", config}, stdout: "no changes: the host matches the configuration"}})
}

// TestCompletions asks lvsd what the shells' scripts ask it: commands,
// backend actions, and service names and backends from --config.
func TestCompletions(t *testing.T) {
	config, _ := cliConfig(t)
	for _, tc := range []struct {
		line []string // after lvsd __complete; the last word is being completed
		want []string
	}{
		{[]string{"sta"}, []string{"status"}},
		{[]string{"backend", ""}, []string{"clear", "drain", "list", "undrain", "weight"}},
		{[]string{"--config", config, "backend", "drain", ""}, []string{"web"}},
		{[]string{"backend", "drain", "--config", config, "web", ""}, []string{"10.0.0.11", "10.0.0.12"}},
		{[]string{"backend", "clear", "--config", config, "--socket", filepath.Join(t.TempDir(), "none"), "web", ""}, []string{"10.0.0.11", "10.0.0.12"}},
		{[]string{"explain", "--config", config, "192.0.2.7", ""}, []string{"10.0.0.50:80/tcp"}},
		{[]string{"status", "--config", config, "--service", ""}, []string{"web"}},
		{[]string{"status", "--limit", ""}, nil},
		{[]string{"completion", "z"}, []string{"zsh"}},
		{[]string{"man", ""}, []string{"8", "5", "lvsd.yaml"}},
		{[]string{"import", ""}, []string{"ipvsadm", "keepalived"}},
		{[]string{"--config", filepath.Join(t.TempDir(), "none.yaml"), "backend", "drain", ""}, nil},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), append([]string{"__complete"}, tc.line...), &stdout, &stderr); err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			if w, _, _ := strings.Cut(l, "\t"); !strings.HasPrefix(w, ":") {
				got = append(got, w)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("lvsd %q: %q, want %q", tc.line, got, tc.want)
		}
	}
}

// singleDashLongFlags rewrites lvsd's long flags only, and nothing after
// "--".
func TestSingleDashLongFlags(t *testing.T) {
	got := singleDashLongFlags(newRoot(nil, nil), []string{"status", "-json", "-socket=/s", "-V", "-", "-x", "-help", "--", "-json"})
	want := []string{"status", "--json", "--socket=/s", "-V", "-", "-x", "--help", "--", "-json"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
