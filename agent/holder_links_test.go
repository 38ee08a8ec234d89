package agent

import (
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster"
)

// Two services on two interfaces: web on the agent file's eth0, vlan on
// the VLAN interface eth0.20.
const webAndVLAN = webTwo + "---\nservice: vlan\nvip: 10.0.20.50\ninterface: eth0.20\nports: [80]\nbackends:\n  - {address: 10.0.20.11}\n"

// newVLANDirector is a cluster director with webAndVLAN whose holder
// follows eth0.20 through links; devs are the interfaces its host has.
func newVLANDirector(t *testing.T, f *cluster.Fake, name string, priority int, links *arp.FakeLinks, devs ...string) *clusterDirector {
	e := newEnv(t)
	e.service("web", webAndVLAN)
	d := &clusterDirector{env: e, addrs: arp.NewFakeExpiring(devs...), ann: &arp.FakeAnnouncer{}, node: f.Add(name, priority)}
	e.addrs = d.addrs.Fake
	leases := &arp.Leased{Addrs: d.addrs, Announcer: d.ann, Lifetime: 10 * time.Second,
		Burst: []time.Duration{0}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	k := e.kernel()
	k.Addrs, k.Announcer = leases, leases
	h, err := NewHolder(k, d.node, filepath.Join(e.dir, "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h.TrackInterfaces(t.Context(), links)
	d.agent = e.agentWith(Options{Holder: h})
	return d
}

// setLink sets dev up or down on d's host and runs the holder's reaction,
// returning the address calls it made.
func (d *clusterDirector) setLink(t *testing.T, links *arp.FakeLinks, dev string, up bool) []string {
	t.Helper()
	links.Set(dev, up)
	h := d.agent.holder
	select {
	case c := <-h.interfaceChanges():
		if _, err := h.interfaceChanged(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no change of %s reached the holder", dev)
	}
	return d.env.addrs.Ops()
}

// Each VIP goes on its own interface and is announced there; when the
// VLAN interface goes down only its VIP moves to the standby, and comes
// back when it is up.
func TestInterfaceDownMovesItsVIPOnly(t *testing.T) {
	web, vlan := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.20.50")
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Preempt: true, Quorum: 1}, web, vlan)
	links1, links2 := &arp.FakeLinks{}, &arp.FakeLinks{}
	d1 := newVLANDirector(t, f, "d1", 200, links1, "eth0", "eth0.20")
	d2 := newVLANDirector(t, f, "d2", 100, links2, "eth0", "eth0.20")
	got1, got2 := d1.env.reconcile(d1.agent), d2.env.reconcile(d2.agent)
	for _, want := range []string{"add-address eth0 10.0.0.50/32 valid 10s", "add-address eth0.20 10.0.20.50/32 valid 10s"} {
		if !slices.Contains(got1, want) {
			t.Errorf("owner d1 did not %q: %q", want, got1)
		}
	}
	if slices.ContainsFunc(got2, isAddress) {
		t.Errorf("standby d2 changed addresses: %q", got2)
	}
	if a := d1.ann.Sent(); !slices.Equal(a, []string{"announce eth0 10.0.0.50", "announce eth0.20 10.0.20.50"}) {
		t.Errorf("d1 announced %q", a)
	}

	if got := d1.setLink(t, links1, "eth0.20", false); !slices.Equal(got, []string{"delete-address eth0.20 10.0.20.50/32"}) {
		t.Fatalf("d1's eth0.20 down: %q", got)
	}
	if got := d2.takeover(t); !slices.Equal(got, []string{"add-address eth0.20 10.0.20.50/32 valid 10s"}) || f.Owner(vlan) != "d2" {
		t.Fatalf("takeover by d2: %q, owner %q", got, f.Owner(vlan))
	}
	if f.Owner(web) != "d1" {
		t.Errorf("web moved to %q with the VLAN interface", f.Owner(web))
	}
	if st := d1.agent.holder.State(); st.InterfacesDown != "eth0.20" || st.Grounded != "" {
		t.Errorf("state: interfaces down %q, grounded %q", st.InterfacesDown, st.Grounded)
	}

	if got := d1.setLink(t, links1, "eth0.20", true); !slices.Equal(got, []string{"add-address eth0.20 10.0.20.50/32 valid 10s"}) || f.Owner(vlan) != "d1" {
		t.Fatalf("d1's eth0.20 up: %q, owner %q", got, f.Owner(vlan))
	}
	if got := d2.takeover(t); !slices.Equal(got, []string{"delete-address eth0.20 10.0.20.50/32"}) {
		t.Fatalf("handback by d2: %q", got)
	}
	if st := d1.agent.holder.State(); st.InterfacesDown != "" {
		t.Errorf("state after the link is back: interfaces down %q", st.InterfacesDown)
	}
}

// An interface missing at start counts as down: its VIP waits (the
// standby serves it) and the director's other VIPs are held meanwhile.
func TestMissingInterfaceWaits(t *testing.T) {
	web, vlan := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.20.50")
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Preempt: true, Quorum: 1}, web, vlan)
	links1 := &arp.FakeLinks{}
	links1.Set("eth0.20", false) // as arp.Kernel reports a missing link
	d1 := newVLANDirector(t, f, "d1", 200, links1, "eth0")
	d2 := newVLANDirector(t, f, "d2", 100, &arp.FakeLinks{}, "eth0", "eth0.20")
	got1 := d1.env.reconcile(d1.agent)
	if !slices.Contains(got1, "add-address eth0 10.0.0.50/32 valid 10s") || slices.ContainsFunc(got1, func(op string) bool {
		return isAddress(op) && !slices.Contains([]string{"add-address eth0 10.0.0.50/32 valid 10s"}, op)
	}) {
		t.Errorf("d1 without eth0.20: %q", got1)
	}
	if _, err := d1.agent.holder.pass(t.Context()); err != nil {
		t.Errorf("d1's holder fails without eth0.20: %v", err)
	}
	d2.env.reconcile(d2.agent)
	if f.Owner(vlan) != "d2" || f.Owner(web) != "d1" {
		t.Errorf("owners: web %q, vlan %q", f.Owner(web), f.Owner(vlan))
	}
}

// A reload that moves a VIP to another interface takes the address off
// the old one and puts it on the new one, announced there.
func TestReloadMovesTheVIPToItsInterface(t *testing.T) {
	e := newEnv(t)
	e.addrs = arp.NewFake("eth0", "eth1")
	e.service("web", webTwo)
	a := e.agent()
	if got := e.reconcile(a); !slices.Contains(got, "add-address eth0 10.0.0.50/32") {
		t.Fatalf("first pass: %q", got)
	}
	e.service("web", webTwo+"interface: eth1\n")
	e.reload(a)
	got := slices.DeleteFunc(e.reconcile(a), func(op string) bool { return !isAddress(op) })
	if want := []string{"delete-address eth0 10.0.0.50/32", "add-address eth1 10.0.0.50/32"}; !slices.Equal(got, want) {
		t.Errorf("after the reload: %q, want %q", got, want)
	}
}
