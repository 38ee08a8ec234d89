package director

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/statefile"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
)

// holdingNode is a fakeNode that takes restart holds as the real node
// does: under one, Leave keeps the addresses.
type holdingNode struct {
	fakeNode
	mu    *sync.Mutex
	until *time.Time
}

func (n holdingNode) HoldForRestart(_ context.Context, d time.Duration) (cluster.RestartHold, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	*n.until = time.Time{}
	if d <= 0 {
		return cluster.RestartHold{}, nil
	}
	*n.until = time.Now().Add(d)
	var vips []netip.Addr
	if n.Holds(vipPrefix.Addr()) {
		vips = append(vips, vipPrefix.Addr())
	}
	return cluster.RestartHold{Until: *n.until, VIPs: vips}, nil
}

func (n holdingNode) Leave(ctx context.Context, release func(context.Context) error) error {
	n.mu.Lock()
	held := time.Now().Before(*n.until)
	n.mu.Unlock()
	if held {
		n.ev.add("leave for a restart")
		return nil
	}
	return n.fakeNode.Leave(ctx, release)
}

// A restart under a hold: the API call stretches the VIP address's
// lifetime over the hold and records it, the stop keeps the address, and
// the next start adopts it (no removal) and hands it to the cluster node.
func TestRunRestartHold(t *testing.T) {
	o, addrs, ev := setup(t, true)
	var adopted []cluster.Config
	start := o.StartCluster
	var mu sync.Mutex
	var until time.Time
	o.StartCluster = func(c cluster.Config) (Node, error) {
		adopted = append(adopted, c)
		mu.Lock()
		until = time.Time{} // a new process: no hold of its own
		mu.Unlock()
		n, err := start(c)
		return holdingNode{n.(fakeNode), &mu, &until}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	client := api.NewClient(o.Config.Agent.APISocket)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got, _ := addrs.List(ctx, "eth0"); slices.Contains(got, vipPrefix) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("the VIP never arrived")
		}
	}
	for _, bad := range []string{"", "-1s", "2m", "soon"} {
		if err := client.Do(ctx, "POST", RouteRestartHold+"?for="+bad, nil); err == nil {
			t.Errorf("a hold for %q was taken", bad)
		}
	}
	var st RestartHoldStatus
	must(t, client.Do(ctx, "POST", RouteRestartHold+"?for=30s", &st))
	if st.Node != "d1" || st.HoldSeconds != 30 || !slices.Equal(st.VIPs, []string{"10.0.0.50"}) {
		t.Errorf("answer %+v", st)
	}
	if exp, ok := addrs.ExpiresAt("eth0", vipPrefix); !ok || time.Until(exp) < 25*time.Second {
		t.Errorf("the address expires in %v, want the hold's 30s", time.Until(exp))
	}
	cancel()
	must(t, <-done)
	if got, _ := addrs.List(context.Background(), "eth0"); !slices.Contains(got, vipPrefix) || slices.Contains(ev.list(), "delete-address 10.0.0.50/32") {
		t.Fatalf("the stop under the hold: addresses %v, events %q", got, ev.list())
	}

	// The next start adopts the address: nothing deleted, the node told.
	if err := runUntilHeld(t, o, addrs); err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 2 || !slices.Equal(adopted[1].Adopt, []netip.Addr{vipPrefix.Addr()}) || !adopted[1].AdoptUntil.Equal(st.Until) {
		t.Errorf("the restarted node's config: adopt %v until %v, want %v until %v", adopted[1].Adopt, adopted[1].AdoptUntil, st.VIPs, st.Until)
	}
	want := []string{"bind 10.0.0.2:7946", "leave for a restart", "relay stopped", "bind 10.0.0.2:7946", "leave", "delete-address 10.0.0.50/32"}
	if got := ev.list(); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("events:\n got %q\nwant %q…", got, want)
	}
	// The record is taken once: a third start adopts nothing.
	var rec restartHoldRecord
	must(t, statefile.Load(o.Config.Agent.StateDir, restartHoldFile, &rec))
	if !rec.Until.IsZero() {
		t.Errorf("the record is still there: %+v", rec)
	}
}

// Only addresses still on the interface with a lifetime are adopted, and
// only their VIPs claimed: a VIP handed over during the hold stays with
// the director that took it.
func TestAdoptAddresses(t *testing.T) {
	dir := t.TempDir()
	other := netip.MustParsePrefix("10.0.0.51/32")
	must(t, agent.SaveOwnedAddresses(dir, planner.Ownership{Addresses: []planner.OwnedAddress{
		{Interface: "eth0", Prefix: vipPrefix}, {Interface: "eth0", Prefix: other}}}))
	addrs := arp.NewFakeExpiring("eth0")
	must(t, addrs.AddExpiring(context.Background(), "eth0", vipPrefix, 20*time.Second))
	leases := &arp.Leased{Addrs: addrs, Lifetime: 10 * time.Second}
	rec := restartHoldRecord{Until: time.Now().Add(20 * time.Second), VIPs: []netip.Addr{vipPrefix.Addr(), other.Addr()}}
	vips, n, err := adoptAddresses(context.Background(), leases, dir, rec)
	if err != nil || n != 1 || !slices.Equal(vips, []netip.Addr{vipPrefix.Addr()}) {
		t.Errorf("adopted %v (%d addresses), %v; want %v alone", vips, n, err, vipPrefix.Addr())
	}
}

// A stop for a restart (graceful restart on, a hold in force) leaves the
// routes announced and closes the speaker for the restart; any other stop
// closes it as before.
func TestStopSpeakerForRestart(t *testing.T) {
	dir := t.TempDir()
	if restartHoldInForce(dir, time.Now()) {
		t.Fatal("a hold in force without a record")
	}
	must(t, statefile.Save(dir, restartHoldFile, restartHoldRecord{Until: time.Now().Add(20 * time.Second)}))
	if !restartHoldInForce(dir, time.Now()) || restartHoldInForce(dir, time.Now().Add(time.Minute)) {
		t.Error("restartHoldInForce does not follow the record")
	}
	for _, c := range []struct {
		name       string
		gr         bool
		forRestart bool
		ops        []string
	}{
		{"for a restart: the routes stay at the routers", true, true, []string{"announce 192.0.2.10/32", "close for restart"}},
		{"plain stop", true, false, []string{"announce 192.0.2.10/32", "withdraw 192.0.2.10/32", "close"}},
		{"for a restart without graceful restart: a plain stop", false, true,
			[]string{"announce 192.0.2.10/32", "withdraw 192.0.2.10/32", "close"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fk, err := bgp.NewFake(bgp.Config{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.2"),
				GracefulRestart: bgp.GracefulRestart{Enabled: c.gr},
				Peers:           []bgp.PeerConfig{{Address: netip.MustParseAddr("10.0.0.10"), ASN: 65000}}})
			must(t, err)
			must(t, fk.SetRoutes(context.Background(), []bgp.Route{{Prefix: netip.MustParsePrefix("192.0.2.10/32")}}))
			stopSpeaker(fk, nil, 0, c.forRestart, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if got := fk.Ops(); !slices.Equal(got, c.ops) {
				t.Errorf("speaker ops %q, want %q", got, c.ops)
			}
		})
	}
}
