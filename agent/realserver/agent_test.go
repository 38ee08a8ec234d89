package realserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/nat"
	"github.com/lvsd/lvsd/nat/toa"
)

// env is a real server whose host is the stateful fakes.
type env struct {
	t     *testing.T
	dir   string
	addrs *arp.Fake
	sys   *sysctl.Fake
	tun   *arp.FakeTunnels
	nft   *nat.Fake
	toa   *toa.FakeRealServer
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newEnv(t *testing.T, realserver string, lo ...string) *env {
	e := &env{t: t, dir: t.TempDir(), addrs: newLo(t, lo...), sys: sysctl.NewFakeConf("eth0"), tun: arp.NewFakeTunnels(), nft: nat.NewFake(), toa: toa.NewFakeRealServer()}
	e.write(realserver)
	return e
}

func (e *env) path() string { return filepath.Join(e.dir, "lvsd.yaml") }

// write replaces the agent file's realserver block.
func (e *env) write(realserver string) {
	e.t.Helper()
	body := "node: rs1\nrole: realserver\nstate_dir: state\nrealserver:\n" + realserver
	if err := os.WriteFile(e.path(), []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// host is the real server's host: the fakes.
func (e *env) host() Host {
	return Host{Addrs: e.addrs, Sysctls: e.sys, Tunnels: modules{e.tun, e.sys}, NAT: e.nft, TOA: e.toa}
}

// agent returns a fresh agent with its configuration and record loaded, as
// after a restart.
func (e *env) agent() *Agent {
	e.t.Helper()
	cfg, err := config.LoadAgent(e.path())
	if err != nil {
		e.t.Fatal(err)
	}
	a := New(Options{ConfigPath: e.path(), Config: cfg, Host: e.host(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Dial: e.dial})
	a.setConfig(cfg)
	if a.rec, err = LoadRecord(cfg.StateDir); err != nil {
		e.t.Fatal(err)
	}
	a.publish(nil, nil)
	return a
}

// pass runs one reconcile and returns the host calls it made.
func (e *env) pass(a *Agent) []string {
	a.reconcile(context.Background())
	return append(e.addrs.Ops(), e.sys.Ops()...)
}

func (e *env) lo() []netip.Prefix {
	l, _ := e.addrs.List(context.Background(), "lo")
	return l
}

const twoVIPs = "  vips: [10.0.0.50, \"fd00::50\"]\n  arp_interfaces: [eth0]\n"

func TestColdStartThenNothing(t *testing.T) {
	e := newEnv(t, twoVIPs)
	a := e.agent()
	want := []string{"add-address lo 10.0.0.50/32", "add-address lo fd00::50/128",
		"set net/ipv4/conf/all/arp_ignore=1", "set net/ipv4/conf/all/arp_announce=2",
		"set net/ipv4/conf/eth0/arp_ignore=1", "set net/ipv4/conf/eth0/arp_announce=2"}
	if got := e.pass(a); !slices.Equal(got, want) {
		t.Errorf("cold start:\n got %q\nwant %q", got, want)
	}
	if got := e.pass(a); len(got) > 0 {
		t.Errorf("second pass made calls: %q", got)
	}
	if got := e.pass(e.agent()); len(got) > 0 {
		t.Errorf("a restarted agent made calls: %q", got)
	}
	if st := e.agent().status.Load(); len(st.OwnedAddresses) != 2 || len(st.OwnedSysctls) != 4 {
		t.Errorf("record after restart: %+v", st)
	}
}

// A host set up by hand (the VIP on lo, the sysctls) is adopted without a
// call, and what lvsd did not add stays when the VIP leaves the
// configuration or on cleanup.
func TestAdoptsHandMadeSetup(t *testing.T) {
	e := newEnv(t, twoVIPs, "10.0.0.50/32", "fd00::50/128")
	for _, k := range []string{"all", "eth0"} {
		e.sys.Put("net/ipv4/conf/"+k+"/arp_ignore", "1")
		e.sys.Put("net/ipv4/conf/"+k+"/arp_announce", "2")
	}
	a := e.agent()
	if got := e.pass(a); len(got) > 0 {
		t.Errorf("adopting made calls: %q", got)
	}
	e.write("  vips: [10.0.0.50]\n")
	a.reload("test")
	if got := e.pass(a); len(got) > 0 {
		t.Errorf("removing a VIP lvsd did not add made calls: %q", got)
	}
	ops, err := Cleanup(context.Background(), Host{Addrs: e.addrs, Sysctls: e.sys}, filepath.Join(e.dir, "state"))
	if err != nil || len(ops) > 0 {
		t.Errorf("cleanup of a hand-made setup: %v %v", opStrings(ops), err)
	}
}

func TestRemovesOnlyWhatItAdded(t *testing.T) {
	e := newEnv(t, "  vips: [10.0.0.50, 10.0.0.51]\n", "192.0.2.99/32") // 192.0.2.99: by hand
	before := e.sys.Values()
	a := e.agent()
	e.pass(a)
	e.write("  vips: [10.0.0.50]\n")
	a.reload("test")
	if got := e.pass(a); !slices.Equal(got, []string{"delete-address lo 10.0.0.51/32"}) {
		t.Errorf("removing 10.0.0.51 from the config: %q", got)
	}
	// A stopped agent leaves everything; cleanup takes exactly lvsd's part.
	ops, err := Cleanup(context.Background(), Host{Addrs: e.addrs, Sysctls: e.sys}, filepath.Join(e.dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"delete-address 10.0.0.50/32 dev lo", "restore-sysctl net/ipv4/conf/all/arp_ignore=0",
		"restore-sysctl net/ipv4/conf/all/arp_announce=0"}
	if got := opStrings(ops); !slices.Equal(got, want) {
		t.Errorf("cleanup:\n got %q\nwant %q", got, want)
	}
	if got := e.lo(); !slices.Equal(got, []netip.Prefix{pfx("127.0.0.1/8"), pfx("::1/128"), pfx("192.0.2.99/32")}) {
		t.Errorf("lo after cleanup: %v", got)
	}
	if got := e.sys.Values(); !mapsEqual(got, before) {
		t.Errorf("sysctls after cleanup %v, want %v", got, before)
	}
	if ops, err := Cleanup(context.Background(), Host{Addrs: e.addrs, Sysctls: e.sys}, filepath.Join(e.dir, "state")); err != nil || len(ops) > 0 {
		t.Errorf("second cleanup: %q %v", opStrings(ops), err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// An interface that appears later gets its settings at the next pass.
func TestInterfaceAppearsLater(t *testing.T) {
	e := newEnv(t, "  vips: [10.0.0.50]\n  arp_interfaces: [eth1]\n")
	a := e.agent()
	e.pass(a)
	e.sys.AddInterface("eth1")
	if got := e.pass(a); !slices.Equal(got, []string{"set net/ipv4/conf/eth1/arp_ignore=1", "set net/ipv4/conf/eth1/arp_announce=2"}) {
		t.Errorf("after eth1 appeared: %q", got)
	}
}

func get(t *testing.T, h http.Handler, path string) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Header().Get(WeightHeader), strings.TrimSpace(rec.Body.String())
}

func TestHealthHeader(t *testing.T) {
	var fail error
	var mu sync.Mutex
	e := newEnv(t, "  vips: [10.0.0.50]\n  weight: 7\n  health: {checks: [{address: \"127.0.0.1:80\"}]}\n")
	e.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail != nil {
			return nil, fail
		}
		c1, c2 := net.Pipe()
		c2.Close()
		return c1, nil
	}
	a := e.agent()
	h := a.HealthHandler()
	a.publish([]netip.Addr{netip.MustParseAddr("10.0.0.50")}, nil)
	if code, w, body := get(t, h, "/healthz"); code != 503 || w != "0" || !strings.Contains(body, "1 VIP(s) not on lo") {
		t.Errorf("before the VIP is on lo: %d %q %q", code, w, body)
	}
	e.pass(a)
	if code, w, body := get(t, h, "/healthz"); code != 200 || w != "7" || body != "ok weight=7" {
		t.Errorf("healthy: %d %q %q", code, w, body)
	}
	if err := a.setDrained(true); err != nil {
		t.Fatal(err)
	}
	if code, w, body := get(t, h, "/healthz"); code != 200 || w != "0" || body != "drained weight=0" {
		t.Errorf("drained: %d %q %q", code, w, body)
	}
	mu.Lock()
	fail = errors.New("connection refused")
	mu.Unlock()
	if code, w, body := get(t, h, "/healthz"); code != 503 || w != "0" || !strings.Contains(body, "1 of 1 local checks failed") || strings.Contains(body, "refused") {
		t.Errorf("local check failing: %d %q %q", code, w, body)
	}
	if code, _, _ := get(t, h, "/other"); code != 404 {
		t.Errorf("other path: %d, want 404", code)
	}
}

// One reconcile puts a tunnel real server fully in place (the second round
// after the module's device appeared included), and the endpoint says 503
// while the decapsulation is not.
func TestAgentTunnel(t *testing.T) {
	e := newEnv(t, "  tunnel: {vips: [203.0.113.10], encap: gue, port: 6080}\n  health: {listen: \":8080\"}\n")
	a := e.agent()
	h := a.HealthHandler()
	a.publish(nil, []string{"tunl0 is not up", "gue port 6080 is not open"})
	if code, w, body := get(t, h, "/healthz"); code != 503 || w != "0" || !strings.Contains(body, "2 tunnel(s) not decapsulating") {
		t.Errorf("decapsulation not in place: %d %q %q", code, w, body)
	}
	ops := a.reconcile(context.Background())
	if !slices.ContainsFunc(ops, func(o planner.Op) bool { return o.Kind == planner.SetLinkUp }) {
		t.Errorf("one reconcile did not bring tunl0 up: %q", opStrings(ops))
	}
	if code, _, body := get(t, h, "/healthz"); code != 200 {
		t.Errorf("in place: %d %q", code, body)
	}
	if ops := a.reconcile(context.Background()); len(ops) > 0 {
		t.Errorf("second reconcile: %q", opStrings(ops))
	}
	rec, err := LoadRecord(filepath.Join(e.dir, "state"))
	if err != nil || len(rec.Links) != 1 || len(rec.FouPorts) != 1 || !rec.NAT {
		t.Errorf("record on disk %+v (%v): want tunl0, the GUE port and the tables", rec, err)
	}
}

// running is an agent served on a unix socket, as `lvsd run` does.
type running struct {
	a      *Agent
	client *api.Client
	reload chan os.Signal
	stop   func()
}

func (e *env) run() *running {
	e.t.Helper()
	sock := filepath.Join(e.dir, "api.sock")
	l, err := api.Listen(sock)
	if err != nil {
		e.t.Fatal(err)
	}
	a := New(Options{ConfigPath: e.path(), Host: e.host(), Dial: e.dial,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Check: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{a: a, client: api.NewClient(sock), reload: make(chan os.Signal)}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, r.reload, l, nil) }()
	r.stop = func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Error(err)
		}
	}
	e.t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			r.stop()
		}
	})
	// Ready once the first pass put the VIPs on lo.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st := a.status.Load(); st != nil && len(st.MissingVIPs) == 0 {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the agent did not put its VIPs on lo: %+v", a.status.Load())
		}
	}
}

// A drain goes through the API socket, is on record before it is answered,
// and survives a restart of the agent.
func TestDrainSurvivesRestart(t *testing.T) {
	e := newEnv(t, "  vips: [10.0.0.50]\n  weight: 5\n")
	r := e.run()
	ctx := context.Background()
	var st Status
	if err := r.client.Do(ctx, "POST", RouteDrain, &st); err != nil {
		t.Fatal(err)
	}
	if !st.Drained || st.Weight != 0 || st.ConfiguredWeight != 5 {
		t.Errorf("after drain: %+v", st)
	}
	if rec, _ := LoadRecord(filepath.Join(e.dir, "state")); !rec.Drained {
		t.Errorf("drain not on record when answered")
	}
	r.stop()

	r = e.run()
	if err := r.client.Do(ctx, "GET", RouteStatus, &st); err != nil {
		t.Fatal(err)
	}
	if !st.Drained || st.Weight != 0 {
		t.Errorf("after a restart the server is no longer drained: %+v", st)
	}
	if code, w, _ := get(t, r.a.HealthHandler(), "/healthz"); code != 200 || w != "0" {
		t.Errorf("header after restart: %d %q, want 200 0", code, w)
	}
	for range 2 { // idempotent
		if err := r.client.Do(ctx, "POST", RouteUndrain, &st); err != nil {
			t.Fatal(err)
		}
	}
	if st.Drained || st.Weight != 5 {
		t.Errorf("after undrain: %+v", st)
	}
}

// An edited agent file is picked up; a broken one keeps the last good one.
func TestReload(t *testing.T) {
	e := newEnv(t, "  vips: [10.0.0.50]\n  weight: 5\n")
	r := e.run()
	waitWeight := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			st := r.a.status.Load()
			if st != nil && st.Weight == want {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("status %+v, want weight %d", st, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitWeight(5)
	e.write("  vips: [10.0.0.50, 10.0.0.51]\n  weight: 9\n")
	r.reload <- syscall.SIGHUP
	waitWeight(9)
	e.write("  vips: [10.0.0.500]\n  weight: 1\n")
	r.reload <- syscall.SIGHUP
	r.reload <- syscall.SIGHUP // the second returns once the first was handled
	if w := r.a.status.Load().Weight; w != 9 {
		t.Errorf("a broken file changed the weight to %d", w)
	}
	r.stop()
	if got := e.lo(); !slices.Contains(got, pfx("10.0.0.51/32")) {
		t.Errorf("the reloaded VIP is not on lo: %v", got)
	}
}

// Stopping the agent removes nothing: a restart must not drop traffic.
func TestStopLeavesEverything(t *testing.T) {
	e := newEnv(t, twoVIPs)
	r := e.run()
	e.addrs.Ops()
	e.sys.Ops()
	lo, sys := e.lo(), e.sys.Values()
	r.stop()
	if ops := append(e.addrs.Ops(), e.sys.Ops()...); len(ops) > 0 {
		t.Errorf("stopping made calls: %q", ops)
	}
	if !slices.Equal(e.lo(), lo) || !mapsEqual(e.sys.Values(), sys) {
		t.Errorf("stopping changed the host")
	}
}

// An edit is reloaded once it stayed the same for a tick, unless the agent
// file says reload.watch: false: then only a reload request reads it.
func TestReloadWatch(t *testing.T) {
	for _, c := range []struct {
		reload string // the agent file's reload block
		byEdit bool
	}{
		{"", true},
		{"reload: {watch: false}\n", false},
	} {
		e := newEnv(t, "  vips: [10.0.0.50]\n"+c.reload)
		a := e.agent()
		pending := a.fingerprint
		e.write("  vips: [10.0.0.50, 10.0.0.51]\n" + c.reload)
		if a.editToReload(&pending) {
			t.Errorf("%q: reloaded before the edit settled for a tick", c.reload)
		}
		for range 3 {
			if got := a.editToReload(&pending); got != c.byEdit {
				t.Errorf("%q: settled edit to be reloaded: %v, want %v", c.reload, got, c.byEdit)
			}
		}
	}
}

// A reload through the API socket answers once the VIPs are in place, and
// says when the agent file was rejected.
func TestReloadRequest(t *testing.T) {
	// Without watching: a watcher that reloaded the edit first would leave
	// the request nothing to change (seen under load, the check being
	// every 10 ms here).
	const noWatch = "reload: {watch: false}\n"
	e := newEnv(t, "  vips: [10.0.0.50]\n"+noWatch)
	r := e.run()
	ctx := context.Background()
	e.write("  vips: [10.0.0.50, 10.0.0.51]\n" + noWatch)
	var res api.ReloadResult
	if err := r.client.Do(ctx, "POST", api.RouteReload, &res); err != nil {
		t.Fatal(err)
	}
	if res.Rejected || res.Error != "" || res.Changes == 0 {
		t.Errorf("after adding a VIP: %+v", res)
	}
	if st := r.a.status.Load(); len(st.VIPs) != 2 {
		t.Errorf("answered before the VIPs were in place: %+v", st)
	}
	e.write("  vips: [not-an-address]\n" + noWatch)
	if err := r.client.Do(ctx, "POST", api.RouteReload, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Rejected || !strings.Contains(res.Error, "lvsd.yaml") {
		t.Errorf("after a broken edit: %+v", res)
	}
	if st := r.a.status.Load(); len(st.VIPs) != 2 {
		t.Errorf("a rejected reload changed the VIPs: %+v", st)
	}
}
