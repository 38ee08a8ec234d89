package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/nat"
)

// lvsd runs the command line and returns its output and exit code.
func lvsd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), exitCode(err)
}

// programmedHost is a host with the fakes on which lvsd has applied
// config, with its records written as the agent writes them and backend
// 10.0.0.11 drained by the operator.
func programmedHost(t *testing.T, config string) agent.Kernel {
	t.Helper()
	k := fakeHost(t)
	// Shaped as openKernel's: conntrack restores possible.
	k.Conntrack, k.Announcer = &nat.ConntrackFake{}, &arp.FakeAnnouncer{}
	planKernel = func() (agent.Kernel, error) { return k, nil }
	ctx := context.Background()
	cfg, err := agent.LoadConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := agent.PlanFor(ctx, cfg, k, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(k.Apply(ctx, ops)...); err != nil {
		t.Fatal(err)
	}
	var owned planner.Ownership
	for _, op := range ops {
		switch op.Kind {
		case planner.AddService:
			owned.Services = append(owned.Services, op.Service.ServiceKey)
		case planner.AddAddress:
			owned.Addresses = append(owned.Addresses, planner.OwnedAddress{Interface: op.Interface, Prefix: op.Address})
		}
	}
	if len(owned.Services) == 0 || len(owned.Addresses) == 0 {
		t.Fatalf("the plan added no service or no address: %v", ops)
	}
	stateDir := cfg.Agent.StateDir
	drained := planner.Overrides{"web/10.0.0.11": {Service: "web", Backend: "10.0.0.11", Drained: true}}
	if err := errors.Join(agent.SaveOwnedServices(stateDir, owned), agent.SaveOwnedAddresses(stateDir, owned),
		agent.SaveOverrides(stateDir, drained)); err != nil {
		t.Fatal(err)
	}
	return k
}

// plan --from a snapshot prints what plan prints on the host the snapshot
// was taken of, whatever the configuration has become since, and never
// opens a kernel.
func TestPlanFromSnapshot(t *testing.T) {
	config, _ := cliConfig(t)
	programmedHost(t, config)
	snapJSON, stderr, code := lvsd(t, "snapshot", "--config", config)
	if code != 0 {
		t.Fatalf("snapshot: exit %d: %s", code, stderr)
	}
	snap := filepath.Join(t.TempDir(), "snap.json")
	if err := os.WriteFile(snap, []byte(snapJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	web := filepath.Join(filepath.Dir(config), "services.d", "web.yaml")
	for _, tc := range []struct {
		name    string
		service string // web.yaml now; "" to remove it
		want    string // in the plan
	}{
		{"unchanged: only the drain", "", "-> 10.0.0.11:80 weight 0"},
		{"backend added", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n  - {address: 10.0.0.13}\n",
			"add-destination"},
		{"scheduler changed", "service: web\nvip: 10.0.0.50\nports: [80]\nscheduler: wlc\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n",
			"update-service"},
		{"service moved", "service: web\nvip: 10.0.0.60\nports: [8080]\nbackends:\n  - {address: 10.0.0.11}\n",
			"add-service tcp:10.0.0.60:8080"},
		{"service removed", "-", "draining"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch tc.service {
			case "":
			case "-":
				if err := os.Remove(web); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.WriteFile(web, []byte(tc.service), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, flags := range [][]string{nil, {"--json"}, {"--takeover", "--detailed-exitcode"}} {
				args := append([]string{"plan", "--config", config}, flags...)
				onHost, stderr, hostCode := lvsd(t, args...)
				if hostCode != 0 && hostCode != exitPending {
					t.Fatalf("%q: exit %d: %s", args, hostCode, stderr)
				}
				if !strings.Contains(onHost, tc.want) {
					t.Errorf("%q: no %q in\n%s", args, tc.want, onHost)
				}
				saved := planKernel
				planKernel = func() (agent.Kernel, error) { return agent.Kernel{}, errors.New("plan --from opened the kernel") }
				fromSnap, stderr, code := lvsd(t, append(args, "--from", snap)...)
				planKernel = saved
				if code != hostCode || fromSnap != onHost {
					t.Errorf("%q --from: exit %d (%s), want %d; got\n%s\nwant\n%s", args, code, stderr, hostCode, fromSnap, onHost)
				}
			}
		})
	}
}

// A snapshot that is not one, or of another schema, is refused with the
// file named.
func TestPlanFromBadSnapshot(t *testing.T) {
	config, _ := cliConfig(t)
	programmedHost(t, config)
	good, _, _ := lvsd(t, "snapshot", "--config", config)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body, want string
	}{
		{"schema2.json", strings.Replace(good, `"schema": 1`, `"schema": 2`, 1), "snapshot schema 2; this lvsd reads schema 1 only"},
		{"noschema.json", `{"ipvs_services": []}`, `not a snapshot of lvsd: no "schema"`},
		{"yaml.json", "schema: 1\n", "not a snapshot of lvsd: invalid character"},
		{"truncated.json", good[:strings.LastIndex(good[:len(good)/2], "\n")], "not a snapshot of lvsd: unexpected end of JSON input"},
		{"unknown.json", strings.Replace(good, `"schema": 1`, `"schema": 1, "bogus": true`, 1), `unknown field "bogus"`},
		{"nosysctl.json", strings.Replace(good, `"net/ipv4/vs/expire_nodest_conn"`, `"net/ipv4/vs/other"`, 1),
			"sysctl net/ipv4/vs/expire_nodest_conn is not in the snapshot"},
	} {
		file := filepath.Join(dir, tc.name)
		if err := os.WriteFile(file, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := lvsd(t, "plan", "--config", config, "--from", file)
		if code != exitFailure || !strings.Contains(stderr, file) || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1, the file and %q", tc.name, code, stderr, tc.want)
		}
	}
	_, stderr, code := lvsd(t, "plan", "--config", config, "--from", filepath.Join(dir, "none.json"))
	if code != exitFailure || !strings.Contains(stderr, "none.json") {
		t.Errorf("a missing snapshot: exit %d, %q", code, stderr)
	}
}
