package cluster

import (
	"context"
	"net/netip"
	"slices"
	"testing"
)

// vipOwnership is the agent's interface (agent.VIPOwnership), restated so
// this package need not import agent.
type vipOwnership interface {
	Holds(netip.Addr) bool
	Changed() <-chan struct{}
}

// viewer is how the agent's status reads the cluster view.
type viewer interface {
	View(context.Context) (View, error)
}

var (
	_ vipOwnership = (*Node)(nil)
	_ vipOwnership = (*FakeNode)(nil)
	_ viewer       = (*Node)(nil)
	_ viewer       = (*FakeNode)(nil)
)

func TestFake(t *testing.T) {
	f := NewFake(Rules{Mode: ActiveStandby, Preempt: true, Quorum: 2}, vip1, vip2)
	a := f.Add("a", 200)
	if a.Holds(vip1) {
		t.Error("a alone holds a VIP below the quorum of 2")
	}
	b := f.Add("b", 100)
	if !a.Holds(vip1) || !a.Holds(vip2) || b.Holds(vip1) || f.Owner(vip1) != "a" {
		t.Fatalf("owners %q %q, want a", f.Owner(vip1), f.Owner(vip2))
	}
	drain(a.Changed())
	drain(b.Changed())
	f.Add("c", 50)
	f.SetUp("a", false)
	if f.Owner(vip1) != "b" || f.Owner(vip2) != "b" {
		t.Errorf("after a failed: owners %q %q, want b", f.Owner(vip1), f.Owner(vip2))
	}
	if !signalled(a.Changed()) || !signalled(b.Changed()) {
		t.Error("Changed not signalled on both sides of the move")
	}
	v, _ := b.View(context.Background())
	if v.State != "active" || v.Live != 2 || v.Members[0].Name != "b" || v.VIPs[0].Owner != "b" {
		t.Errorf("b's view: %+v", v)
	}
	f.SetUp("b", false) // c alone: no quorum
	if f.Owner(vip1) != "" {
		t.Errorf("%s owned by %q without quorum", vip1, f.Owner(vip1))
	}
	f.SetUp("a", true) // preempt: a again
	if f.Owner(vip1) != "a" {
		t.Errorf("owner %q after a came back, want a", f.Owner(vip1))
	}
	// A director that stops serving a VIP lets it go to the next one.
	a.Serve([]netip.Addr{vip2})
	if f.Owner(vip1) != "c" || f.Owner(vip2) != "a" || !slices.Equal(a.Served(), []netip.Addr{vip2}) {
		t.Errorf("a serves only %v: owners %q %q", vip2, f.Owner(vip1), f.Owner(vip2))
	}
}

func drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}

func signalled(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
