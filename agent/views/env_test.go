package views

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// testEnv is a director whose kernel is the stateful fakes; its agent is
// driven by hand (agent.Start, Step) on the test's goroutine, with the
// test's clock.
type testEnv struct {
	t       testing.TB
	dir     string
	ipvs    *ipvs.Fake
	addrs   *arp.Fake
	nat     *nat.Fake
	conns   *ipvs.ConnFake
	sysctls *sysctl.Fake
	now     time.Time
}

func newEnv(t testing.TB) *testEnv {
	// An agent with a large heap sets the process's soft memory limit;
	// the next test's heap is its own.
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "services.d"), 0o755)
	writeTestFile(t, filepath.Join(dir, "lvsd.yaml"), "node: d1\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n")
	return &testEnv{t: t, dir: dir, ipvs: ipvs.NewFake(), addrs: arp.NewFake("eth0"), nat: nat.NewFake(), conns: &ipvs.ConnFake{},
		sysctls: sysctl.NewFake(map[string]string{
			"net/ipv4/ip_forward": "0", "net/ipv6/conf/all/forwarding": "0",
			"net/ipv4/conf/all/send_redirects": "1", "net/ipv4/conf/eth0/send_redirects": "1",
			"net/ipv4/vs/conntrack": "0", "net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
			"net/ipv4/vs/sync_version": "1", "net/ipv4/vs/sync_ports": "1", "net/ipv4/vs/sync_threshold": "3\t50",
			"net/ipv4/vs/sync_refresh_period": "0", "net/ipv4/vs/sync_persist_mode": "0",
			"net/ipv4/vs/sloppy_tcp": "0", "net/ipv4/vs/sloppy_sctp": "0",
		}),
		now: time.Unix(1000, 0)}
}

func writeTestFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) service(name, body string) {
	writeTestFile(e.t, filepath.Join(e.dir, "services.d", name+".yaml"), body)
}

// bulkServices writes n services s0, s1, … on VIP 10.0.1.1, ports 1000 and
// up, each with backends (a YAML flow list's items), into one file.
func (e *testEnv) bulkServices(n int, backends string) {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\nservice: s%d\nvip: 10.0.1.1\nports: [%d]\nbackends: [%s]\n", i, 1000+i, backends)
	}
	e.service("bulk", b.String())
}

// kernel is the director's host: the fakes.
func (e *testEnv) kernel() agent.Kernel {
	return agent.Kernel{IPVS: e.ipvs, Daemons: e.ipvs, Timeouts: e.ipvs, Conns: e.conns, Addrs: e.addrs, NAT: e.nat, Sysctls: e.sysctls}
}

// unstarted returns a fresh agent, as after a restart, with opts completed
// by the test's kernel, log, clock, configuration and a VIP holder that
// holds every VIP.
func (e *testEnv) unstarted(opts agent.Options) *agent.Agent {
	e.t.Helper()
	opts.ConfigPath = filepath.Join(e.dir, "lvsd.yaml")
	if opts.Kernel.IPVS == nil {
		opts.Kernel = e.kernel()
	}
	opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.Now = func() time.Time { return e.now }
	cfg, err := agent.LoadConfig(opts.ConfigPath)
	if err != nil {
		e.t.Fatal(err)
	}
	opts.Config = cfg
	if opts.Holder == nil {
		if opts.Holder, err = agent.NewHolder(opts.Kernel, nil, filepath.Join(e.dir, "state"), nil); err != nil {
			e.t.Fatal(err)
		}
	}
	return agent.New(opts)
}

// agentWith returns the views of a fresh agent, started: its configuration
// loaded, no pass run yet.
func (e *testEnv) agentWith(opts agent.Options) *Views {
	e.t.Helper()
	a := e.unstarted(opts)
	if err := a.Start(); err != nil {
		e.t.Fatal(err)
	}
	return New(a)
}

func (e *testEnv) agent() *Views {
	e.t.Helper()
	return e.agentWith(agent.Options{})
}

// reconcile runs what the agent's loop would run at a Check tick, and
// returns the kernel calls it made.
func (e *testEnv) reconcile(v *Views, recheck ...ipvs.ServiceKey) []string {
	e.t.Helper()
	v.a.Step(context.Background(), recheck...)
	return append(e.ipvs.Ops(), e.addrs.Ops()...)
}

// resync runs a pass that reads back and plans everything.
func (e *testEnv) resync(v *Views) {
	e.t.Helper()
	v.a.Resync(context.Background())
}

func (e *testEnv) reload(v *Views) {
	e.t.Helper()
	v.a.Reload()
}

// run runs a's loop until the test ends, once its first pass is done.
func (e *testEnv) run(a *agent.Agent) *Views {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, nil) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Error(err)
		}
	})
	for a.Published() == nil {
		select {
		case err := <-done:
			e.t.Fatalf("the agent stopped before its first pass: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	return New(a)
}

const webTwo = "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.12}\n  - {address: 10.0.0.11}\n"

// fakeHealth reports fixed states and records the targets it was given.
type fakeHealth struct {
	targets []health.Target
	states  map[string]health.State
}

func (f *fakeHealth) Set(t []health.Target) { f.targets = t }

// Update keeps the targets of other groups and appends t, as the monitor
// ends up with.
func (f *fakeHealth) Update(groups map[string]bool, t []health.Target) {
	f.targets = append(slices.DeleteFunc(slices.Clone(f.targets), func(x health.Target) bool { return groups[x.Group] }), t...)
}

func (f *fakeHealth) Snapshot() map[string]health.State { return f.states }

func (f *fakeHealth) States(keys []string, each func(int, health.State, bool)) {
	for i, k := range keys {
		st, ok := f.states[k]
		each(i, st, ok)
	}
}

// Changes hands every state, as a checker that cannot tell what changed.
func (f *fakeHealth) Changes() (map[string]health.State, []string, bool) {
	return f.states, nil, true
}
func (f *fakeHealth) Changed() <-chan struct{} { return nil }
