package director

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// events records what happened, in order, across goroutines.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, s)
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// fakeNode is a cluster member of a cluster.Fake.
type fakeNode struct {
	*cluster.FakeNode
	ev *events
}

// The real node and the fake have every method the director calls, the
// health vote's too.
var (
	_ Node = (*cluster.Node)(nil)
	_ Node = fakeNode{}
)

func (n fakeNode) Broadcast([]byte)             {}
func (n fakeNode) SendTo(string, []byte)        {}
func (n fakeNode) SetSync(cluster.SyncReceiver) {}
func (n fakeNode) Healthy() bool                { return true }
func (n fakeNode) HoldForRestart(context.Context, time.Duration) (cluster.RestartHold, error) {
	return cluster.RestartHold{}, errors.New("no restart hold in this test (holdingNode)")
}
func (n fakeNode) Leave(ctx context.Context, release func(context.Context) error) error {
	n.ev.add("leave")
	if release == nil {
		return nil
	}
	return release(ctx)
}

// fakeRelay runs until its context ends.
type fakeRelay struct{ ev *events }

func (fakeRelay) Stats() connsync.Stats                           { return connsync.Stats{} }
func (fakeRelay) ForgetDestinations(netip.Addr, []netip.AddrPort) {}
func (r fakeRelay) ReleaseVIP(v netip.Addr)                       { r.ev.add("release-connections " + v.String()) }
func (fakeRelay) Deliver([]byte)                                  {}
func (fakeRelay) SetServices([]connsync.Service)                  {}
func (fakeRelay) MemberJoined(string)                             {}
func (fakeRelay) MemberLeft(string)                               {}
func (r fakeRelay) Run(ctx context.Context) error {
	<-ctx.Done()
	r.ev.add("relay stopped")
	return nil
}

// recordingAddrs records address changes as events.
type recordingAddrs struct {
	*arp.FakeExpiring
	ev *events
}

func (a recordingAddrs) Delete(ctx context.Context, dev string, p netip.Prefix) error {
	a.ev.add("delete-address " + p.String())
	return a.FakeExpiring.Delete(ctx, dev, p)
}

func setup(t *testing.T, clustered bool) (Options, *arp.FakeExpiring, *events) {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "services.d"), 0o755))
	agentFile := "node: d1\ninterface: eth0\nservices_dir: " + filepath.Join(dir, "services.d") + "\nstate_dir: " +
		filepath.Join(dir, "state") + "\napi: {socket: " + filepath.Join(dir, "lvsd.sock") + "}\n"
	if clustered {
		must(t, os.WriteFile(filepath.Join(dir, "key"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
		agentFile += "cluster: {key_file: " + filepath.Join(dir, "key") + ", peers: [], conn_sync: {enabled: true}}\n"
	}
	must(t, os.WriteFile(filepath.Join(dir, "lvsd.yaml"), []byte(agentFile), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "services.d", "web.yaml"),
		[]byte("service: web\nvip: 10.0.0.50\nports: [80]\nbackends: [{address: 10.0.0.11}]\n"), 0o644))
	cfg, err := agent.LoadConfig(filepath.Join(dir, "lvsd.yaml"))
	must(t, err)
	ev := &events{}
	addrs := arp.NewFakeExpiring("eth0")
	must(t, addrs.Fake.Add(context.Background(), "eth0", netip.MustParsePrefix("10.0.0.2/24"))) // the director's own
	ipvsFake := ipvs.NewFake()
	o := Options{
		ConfigPath: filepath.Join(dir, "lvsd.yaml"), Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Kernel: agent.Kernel{IPVS: ipvsFake, Daemons: ipvsFake, NAT: nat.NewFake(), Sysctls: sysctl.NewFake(nil),
			Addrs: recordingAddrs{addrs, ev}, Announcer: &arp.FakeAnnouncer{}},
		Leases: recordingAddrs{addrs, ev},
	}
	if clustered {
		f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Quorum: 1}, netip.MustParseAddr("10.0.0.50"))
		o.StartCluster = func(c cluster.Config) (Node, error) {
			ev.add("bind " + c.Bind)
			return fakeNode{f.Add("d1", 100), ev}, nil
		}
		o.NewRelay = func(connsync.Config) (Relay, error) { return fakeRelay{ev}, nil }
	}
	return o, addrs, ev
}

var vipPrefix = netip.MustParsePrefix("10.0.0.50/32")

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runUntilHeld runs the director until its VIP is on eth0, then stops it
// and returns Run's error.
func runUntilHeld(t *testing.T, o Options, addrs *arp.FakeExpiring) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	var st views.Status
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		err = api.NewClient(o.Config.Agent.APISocket).Do(ctx, "GET", views.RouteStatus, &st)
		if got, _ := addrs.List(ctx, "eth0"); slices.Contains(got, vipPrefix) && err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the VIP never arrived, or no status: %v", err)
		}
	}
	if len(st.Services) != 1 || !st.Services[0].VIPHeld {
		t.Errorf("status over the API: %+v", st)
	}
	cancel()
	return <-done
}

// A director alone keeps its VIP when it stops: a restart costs nothing.
func TestRunAlone(t *testing.T) {
	o, addrs, ev := setup(t, false)
	if err := runUntilHeld(t, o, addrs); err != nil {
		t.Fatal(err)
	}
	if got, _ := addrs.List(context.Background(), "eth0"); !slices.Contains(got, vipPrefix) || len(ev.list()) != 0 {
		t.Errorf("after stopping: addresses %v, events %q", got, ev.list())
	}
}

// A cluster director stops in order: the agent, then it leaves the
// cluster (its VIP goes and the relay hears of it), then the relay stops.
func TestRunClusterStopsInOrder(t *testing.T) {
	o, addrs, ev := setup(t, true)
	if err := runUntilHeld(t, o, addrs); err != nil {
		t.Fatal(err)
	}
	// cluster.bind unset: the director's own address, not all of them.
	want := []string{"bind 10.0.0.2:7946", "leave", "delete-address 10.0.0.50/32", "release-connections 10.0.0.50", "relay stopped"}
	if got := ev.list(); !slices.Equal(got, want) {
		t.Errorf("shutdown:\n got %q\nwant %q", got, want)
	}
	if got, _ := addrs.List(context.Background(), "eth0"); slices.Contains(got, vipPrefix) {
		t.Errorf("addresses left: %v", got)
	}
}
