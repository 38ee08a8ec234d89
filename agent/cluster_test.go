package agent

import (
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster"
)

// Both of the cluster's nodes decide the holder's VIPs; the compiler
// checks they have every method it calls.
var (
	_ VIPOwnership = (*cluster.Node)(nil)
	_ VIPOwnership = (*cluster.FakeNode)(nil)
)

// clusterDirector is a director of an in-memory cluster: its holder adds
// VIPs through arp.Leased (lifetime, announcement) on a fake kernel.
type clusterDirector struct {
	env   *testEnv
	agent *Agent
	node  *cluster.FakeNode
	addrs *arp.FakeExpiring
	ann   *arp.FakeAnnouncer
}

func newClusterDirector(t *testing.T, f *cluster.Fake, name string, priority int) *clusterDirector {
	e := newEnv(t)
	e.service("web", webTwo)
	d := &clusterDirector{env: e, addrs: arp.NewFakeExpiring("eth0"), ann: &arp.FakeAnnouncer{}, node: f.Add(name, priority)}
	e.addrs = d.addrs.Fake
	leases := &arp.Leased{Addrs: d.addrs, Announcer: d.ann, Lifetime: 10 * time.Second,
		Burst: []time.Duration{0}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	k := e.kernel()
	k.Addrs, k.Announcer = leases, leases
	h, err := NewHolder(k, d.node, filepath.Join(e.dir, "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.agent = e.agentWith(Options{Holder: h})
	return d
}

// Two directors share one VIP through the fake cluster: the owner adds it
// with a lifetime and announces it, the standby only programs IPVS; when
// the owner fails the standby's holder takes the address over.
func TestClusterFakeMovesTheVIP(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Preempt: true, Quorum: 1}, vip)
	d1, d2 := newClusterDirector(t, f, "d1", 200), newClusterDirector(t, f, "d2", 100)
	got1, got2 := d1.env.reconcile(d1.agent), d2.env.reconcile(d2.agent)
	if !slices.Contains(got1, "add-address eth0 10.0.0.50/32 valid 10s") || slices.ContainsFunc(got2, isAddress) {
		t.Fatalf("owner d1: %q; standby d2: %q", got1, got2)
	}
	if a := d1.ann.Sent(); !slices.Equal(a, []string{"announce eth0 10.0.0.50"}) {
		t.Errorf("d1 announced %q", a)
	}
	if p := d1.node.Present(); !p[vip] {
		t.Errorf("d1 did not report its VIP address to the cluster: %v", p)
	}
	f.SetUp("d1", false)
	if got := d2.takeover(t); !slices.Equal(got, []string{"add-address eth0 10.0.0.50/32 valid 10s"}) {
		t.Fatalf("takeover by d2: %q", got)
	}
	if a := d2.ann.Sent(); len(a) != 1 {
		t.Errorf("d2 announced %q", a)
	}
	f.SetUp("d1", true) // preempt: back to d1 once d2 let go
	if got := d2.takeover(t); !slices.Equal(got, []string{"delete-address eth0 10.0.0.50/32"}) {
		t.Fatalf("handback, d2: %q", got)
	}
	if f.Owner(vip) != "d1" || d2.node.Present()[vip] {
		t.Errorf("owner %q after the handback; d2 reports its address present", f.Owner(vip))
	}
}

// takeover runs the holder's pass that an ownership change starts, with
// no reconcile pass, and returns the kernel calls it made.
func (d *clusterDirector) takeover(t *testing.T) []string {
	t.Helper()
	if _, err := d.agent.holder.pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	return append(d.env.ipvs.Ops(), d.env.addrs.Ops()...)
}

func isAddress(op string) bool { return strings.Contains(op, "address") }

// A director whose interface goes down serves no VIP: it deletes the
// address, the cluster gives the VIP to the standby; when the link is back
// the VIP returns (preempt) — and the hooks hear of each move once.
func TestTrackLinkMovesTheVIP(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Preempt: true, Quorum: 1}, vip)
	d1, d2 := newClusterDirector(t, f, "d1", 200), newClusterDirector(t, f, "d2", 100)
	var l1 eventLog
	d1.agent.holder.SetEvents(&l1)
	d1.env.reconcile(d1.agent)
	d2.env.reconcile(d2.agent)
	if f.Owner(vip) != "d1" {
		t.Fatalf("owner %q", f.Owner(vip))
	}
	linkChanged := func(d *clusterDirector, up bool) []string {
		t.Helper()
		if _, err := d.agent.holder.linkChanged(t.Context(), up); err != nil {
			t.Fatal(err)
		}
		return d.env.addrs.Ops()
	}
	if got := linkChanged(d1, false); !slices.Equal(got, []string{"delete-address eth0 10.0.0.50/32"}) {
		t.Fatalf("d1's link down: %q", got)
	}
	if got := d2.takeover(t); !slices.Equal(got, []string{"add-address eth0 10.0.0.50/32 valid 10s"}) || f.Owner(vip) != "d2" {
		t.Fatalf("takeover by d2: %q, owner %q", got, f.Owner(vip))
	}
	if got := linkChanged(d1, false); len(got) != 0 {
		t.Errorf("d1's link down again: %q", got)
	}
	if got := d1.takeover(t); len(got) != 0 {
		t.Errorf("d1 with its link down took %q", got)
	}
	// The fake hands the VIP back at once (the real cluster waits until
	// d2's address is gone).
	if got := linkChanged(d1, true); !slices.Equal(got, []string{"add-address eth0 10.0.0.50/32 valid 10s"}) || f.Owner(vip) != "d1" {
		t.Fatalf("d1's link up: %q, owner %q", got, f.Owner(vip))
	}
	if got := d2.takeover(t); !slices.Equal(got, []string{"delete-address eth0 10.0.0.50/32"}) {
		t.Fatalf("handback by d2: %q", got)
	}
	want := []string{"ownership taken 10.0.0.50", "ownership released 10.0.0.50", "ownership taken 10.0.0.50"}
	if !slices.Equal(l1.got, want) {
		t.Errorf("d1's hook heard %q, want %q", l1.got, want)
	}
}

// A failing upstream check grounds a director as its link going down does,
// and it serves again only when neither holds it back.
func TestTrackUpstreamMovesTheVIP(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Preempt: true, Quorum: 1}, vip)
	d1, d2 := newClusterDirector(t, f, "d1", 200), newClusterDirector(t, f, "d2", 100)
	d1.env.reconcile(d1.agent)
	d2.env.reconcile(d2.agent)
	h := d1.agent.holder
	step := func(name string, change func() ([]planner.Op, error), owner, grounded string) {
		t.Helper()
		if _, err := change(); err != nil {
			t.Fatal(err)
		}
		d1.env.addrs.Ops()
		d2.takeover(t)
		d1.takeover(t)
		if got := f.Owner(vip); got != owner {
			t.Errorf("%s: owner %q, want %q", name, got, owner)
		}
		if got := h.State().Grounded; got != grounded {
			t.Errorf("%s: status says grounded by %q, want %q", name, got, grounded)
		}
	}
	ctx := t.Context()
	step("upstream fails", func() ([]planner.Op, error) { return h.upstreamChanged(ctx, false) }, "d2", "upstream check failing")
	step("link down too", func() ([]planner.Op, error) { return h.linkChanged(ctx, false) }, "d2", "interface down, upstream check failing")
	step("upstream passes, link still down", func() ([]planner.Op, error) { return h.upstreamChanged(ctx, true) }, "d2", "interface down")
	step("link up", func() ([]planner.Op, error) { return h.linkChanged(ctx, true) }, "d1", "")
}
