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

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster"
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
