package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat"
	"github.com/lvsd/lvsd/nat/toa"
)

// testEnv is a director whose kernel is the stateful fakes.
type testEnv struct {
	t       testing.TB
	dir     string
	ipvs    *ipvs.Fake
	addrs   *arp.Fake
	nat     *nat.Fake
	conns   *ipvs.ConnFake
	sysctls *sysctl.Fake
	toa     *toa.FakeDirector
	now     time.Time
}

// freshSysctls are the kernel parameters lvsd may set, as a fresh network
// namespace with the ip_vs module loaded has them.
func freshSysctls() *sysctl.Fake {
	return sysctl.NewFake(map[string]string{
		"net/ipv4/ip_forward": "0", "net/ipv6/conf/all/forwarding": "0",
		"net/ipv4/conf/all/send_redirects": "1", "net/ipv4/conf/eth0/send_redirects": "1",
		"net/ipv4/vs/conntrack": "0", "net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
		"net/ipv4/vs/sync_version": "1", "net/ipv4/vs/sync_ports": "1", "net/ipv4/vs/sync_threshold": "3\t50",
		"net/ipv4/vs/sync_refresh_period": "0", "net/ipv4/vs/sync_persist_mode": "0",
		"net/ipv4/vs/sloppy_tcp": "0", "net/ipv4/vs/sloppy_sctp": "0",
	})
}

func newEnv(t testing.TB) *testEnv {
	// An agent with a large heap sets the process's soft memory limit
	// (memory.go); the next test's heap is its own.
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "services.d"), 0o755)
	writeTestFile(t, filepath.Join(dir, "lvsd.yaml"), "node: d1\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n")
	return &testEnv{t: t, dir: dir, ipvs: ipvs.NewFake(), addrs: arp.NewFake("eth0"), nat: nat.NewFake(), conns: &ipvs.ConnFake{},
		sysctls: freshSysctls(), toa: toa.NewFakeDirector(), now: time.Unix(1000, 0)}
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

// agent returns a fresh agent, as after a restart, with its config loaded.
func (e *testEnv) agent() *Agent {
	e.t.Helper()
	return e.agentHolding(nil)
}

// agentHolding returns a fresh agent whose VIP holder asks vips which VIPs
// it holds (nil: all).
func (e *testEnv) agentHolding(vips VIPOwnership) *Agent {
	e.t.Helper()
	h, err := NewHolder(e.kernel(), vips, filepath.Join(e.dir, "state"), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.agentWith(Options{Holder: h})
}

// agentWith returns a fresh agent with opts completed by the test's
// kernel, log, clock and configuration.
func (e *testEnv) agentWith(opts Options) *Agent {
	e.t.Helper()
	opts.ConfigPath = filepath.Join(e.dir, "lvsd.yaml")
	if opts.Kernel.IPVS == nil {
		opts.Kernel = e.kernel()
	}
	opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.Now = func() time.Time { return e.now }
	a := New(opts)
	cfg, err := LoadConfig(a.opts.ConfigPath)
	if err != nil {
		e.t.Fatal(err)
	}
	a.opts.Config = cfg
	if err := a.start(); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// kernel is the director's host: the fakes.
func (e *testEnv) kernel() Kernel {
	return Kernel{IPVS: e.ipvs, Daemons: e.ipvs, Timeouts: e.ipvs, Conns: e.conns, Addrs: e.addrs, NAT: e.nat, Sysctls: e.sysctls, TOA: e.toa}
}

// reconcile runs what the agent's loop would run at a Check tick (drains
// and the audit step when due, with what is pending) and returns the kernel
// calls it made.
func (e *testEnv) reconcile(a *Agent) []string {
	e.t.Helper()
	a.tick()
	a.reconcile(context.Background())
	return append(e.ipvs.Ops(), e.addrs.Ops()...)
}

// resync runs a pass that reads back and plans everything, as the first
// pass does, and returns the kernel calls it made.
func (e *testEnv) resync(a *Agent) []string {
	e.t.Helper()
	a.pending.merge(scope{all: true, globals: true, holder: true})
	return e.reconcile(a)
}

// ownershipChanged runs what the VIP holder's loop runs when the cluster
// says ownership changed, and returns the address calls it made.
func (e *testEnv) ownershipChanged(a *Agent) []string {
	e.t.Helper()
	if _, err := a.holder.pass(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return e.addrs.Ops()
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

func (e *testEnv) reload(a *Agent) {
	e.t.Helper()
	a.reload("test", nil)
}

const webTwo = "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.12}\n  - {address: 10.0.0.11}\n"

func TestReconcileCreatesThenPlansNothing(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	got := e.reconcile(a)
	want := []string{
		"add-service tcp:10.0.0.50:80 mh flags=mh-fallback,mh-port",
		"add-destination tcp:10.0.0.50:80 10.0.0.11:80 weight=1 route",
		"add-destination tcp:10.0.0.50:80 10.0.0.12:80 weight=1 route",
		"add-address eth0 10.0.0.50/32",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("first reconcile:\n got %q\nwant %q", got, want)
	}
	if got := e.reconcile(a); len(got) != 0 {
		t.Fatalf("second reconcile made calls: %q", got)
	}
	// A restarted agent adopts what is there: zero calls.
	if got := e.reconcile(e.agent()); len(got) != 0 {
		t.Fatalf("restarted agent made calls: %q", got)
	}
}

func TestReconcileWeightChangeIsOneUpdate(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	e.service("web", strings.Replace(webTwo, "{address: 10.0.0.12}", "{address: 10.0.0.12, weight: 4}", 1))
	e.reload(a)
	got := e.reconcile(a)
	want := []string{"update-destination tcp:10.0.0.50:80 10.0.0.12:80 weight=4 route"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestReconcileAddOneBackendAddsOneDestination(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	e.service("web", webTwo+"  - {address: 10.0.0.13}\n")
	e.reload(a)
	got := e.reconcile(a)
	want := []string{"add-destination tcp:10.0.0.50:80 10.0.0.13:80 weight=1 route"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestRemovedBackendDrainsBeforeDelete(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	svc := ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	rs2 := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 80}
	if err := e.ipvs.SetConns(svc, rs2, 3, 1); err != nil {
		t.Fatal(err)
	}
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n")
	e.reload(a)

	steps := []struct {
		advance time.Duration
		active  int
		want    []string
	}{
		{0, 3, []string{"update-destination tcp:10.0.0.50:80 10.0.0.12:80 weight=0 route"}},
		{10 * time.Second, 3, nil}, // still has connections, timeout not reached
		{5 * time.Second, 0, []string{"delete-destination tcp:10.0.0.50:80 10.0.0.12:80"}},
	}
	for i, s := range steps {
		e.now = e.now.Add(s.advance)
		if err := e.ipvs.SetConns(svc, rs2, s.active, 0); err != nil && s.active > 0 {
			t.Fatal(err)
		}
		if got := e.reconcile(a); !slices.Equal(got, s.want) {
			t.Fatalf("step %d: got %q, want %q", i, got, s.want)
		}
	}
}

func TestDrainTimeoutDeletes(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	svc := ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	rs2 := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 80}
	e.ipvs.SetConns(svc, rs2, 5, 0)
	os.Remove(filepath.Join(e.dir, "services.d", "web.yaml"))
	e.reload(a)
	// Both destinations go to weight 0; the VIP stays while connections drain.
	if got := e.reconcile(a); len(got) != 2 || !strings.Contains(got[0], "weight=0") || !strings.Contains(got[1], "weight=0") {
		t.Fatalf("drain start: %q", got)
	}
	e.now = e.now.Add(DefaultDrainTimeout)
	got := e.reconcile(a)
	want := []string{"delete-service tcp:10.0.0.50:80", "delete-address eth0 10.0.0.50/32"}
	if !slices.Equal(got, want) {
		t.Fatalf("after timeout: got %q, want %q", got, want)
	}
}

func TestForeignServicesUntouched(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	foreign := ipvs.Service{ServiceKey: ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("192.0.2.1"), Port: 443}, Scheduler: "rr"}
	e.ipvs.AddService(ctx, foreign)
	e.ipvs.AddDestination(ctx, foreign.ServiceKey, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr("192.0.2.9"), Port: 443}, Weight: 1})
	e.addrs.Add(ctx, "eth0", netip.MustParsePrefix("192.0.2.1/32"))
	e.ipvs.Ops()
	e.addrs.Ops()

	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	os.Remove(filepath.Join(e.dir, "services.d", "web.yaml"))
	e.reload(a)
	e.reconcile(a)
	e.now = e.now.Add(time.Hour)
	e.reconcile(a)
	svcs, _ := e.ipvs.Services(ctx)
	if len(svcs) != 1 || svcs[0].ServiceKey != foreign.ServiceKey {
		t.Fatalf("services left: %v, want only the foreign one", svcs)
	}
	addrs, _ := e.addrs.List(ctx, "eth0")
	if !slices.Equal(addrs, []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}) {
		t.Fatalf("addresses left: %v", addrs)
	}
}

func TestBadReloadKeepsLastGood(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	e.service("web", webTwo+"  - {address: 10.0.0.999}\n")
	e.reload(a)
	// No pass follows a rejected load: the status and the metrics
	// (lvsd_config_last_reload_successful) must show it anyway.
	if s := a.snap.Load(); s == nil || s.Loaded.Err == "" {
		t.Fatal("the rejected reload is not published before the next pass")
	}
	if got := e.reconcile(a); len(got) != 0 {
		t.Fatalf("bad config changed the kernel: %q", got)
	}
}

// An operator's IPVS service on lvsd's VIP keeps the address alive after
// lvsd's own service on that VIP is gone.
func TestVIPKeptWhileForeignServiceUsesIt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	foreign := ipvs.Service{ServiceKey: ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 8080}, Scheduler: "wlc"}
	e.ipvs.AddService(ctx, foreign)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	os.Remove(filepath.Join(e.dir, "services.d", "web.yaml"))
	e.reload(a)
	e.reconcile(a) // drain
	got := e.reconcile(a)
	if !slices.Contains(got, "delete-service tcp:10.0.0.50:80") || slices.ContainsFunc(got, func(op string) bool { return strings.HasPrefix(op, "delete-address") }) {
		t.Fatalf("got %q, want the service deleted and the VIP kept", got)
	}
}

// fakeOwnership holds the VIPs in held.
type fakeOwnership struct {
	held   map[netip.Addr]bool
	served []netip.Addr
}

func (f *fakeOwnership) Serve(vips []netip.Addr)          { f.served = vips }
func (f *fakeOwnership) ServeHomes(map[netip.Addr]string) {}
func (f *fakeOwnership) Holds(vip netip.Addr) bool        { return f.held[vip] }
func (f *fakeOwnership) AddressChanged(netip.Addr, bool)  {}
func (f *fakeOwnership) Changed() <-chan struct{}         { return nil }

// A standby director programs IPVS for every service but announces only the
// VIPs it holds; taking over or releasing one is an address change alone.
func TestVIPOwnershipMovesOnlyAddresses(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	own := &fakeOwnership{held: map[netip.Addr]bool{}}
	a := e.agentHolding(own)
	got := e.reconcile(a)
	if len(got) != 3 || slices.ContainsFunc(got, func(op string) bool { return strings.Contains(op, "address") }) {
		t.Fatalf("standby: got %q, want IPVS programmed and no address", got)
	}
	if want := []netip.Addr{netip.MustParseAddr("10.0.0.50")}; !slices.Equal(own.served, want) {
		t.Fatalf("served %v, want %v: the cluster decides about programmed VIPs", own.served, want)
	}
	own.held[netip.MustParseAddr("10.0.0.50")] = true
	if got := e.ownershipChanged(a); !slices.Equal(got, []string{"add-address eth0 10.0.0.50/32"}) {
		t.Fatalf("takeover: got %q", got)
	}
	own.held = map[netip.Addr]bool{}
	if got := e.ownershipChanged(a); !slices.Equal(got, []string{"delete-address eth0 10.0.0.50/32"}) {
		t.Fatalf("release: got %q", got)
	}
}

// countingIPVS counts destination dumps.
type countingIPVS struct {
	ipvs.Interface
	dumps int
}

func (c *countingIPVS) Destinations(ctx context.Context, k ipvs.ServiceKey) ([]ipvs.Destination, error) {
	c.dumps++
	return c.Interface.Destinations(ctx, k)
}
