package cluster

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"testing"
)

// vipOwnership is the agent's interface (agent.VIPOwnership), restated so
// this package need not import agent.
type vipOwnership interface {
	Serve([]netip.Addr)
	ServeHomes(map[netip.Addr]string)
	Holds(netip.Addr) bool
	AddressChanged(netip.Addr, bool)
	Changed() <-chan struct{}
}

// healthVoter is the director's interface (director.HealthVoter).
type healthVoter interface {
	ShareHealth([]uint64)
	HealthVotes() Votes
	HealthVotesChanged() <-chan struct{}
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
	_ healthVoter  = (*Node)(nil)
	_ healthVoter  = (*FakeNode)(nil)
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

// The fake's directors hear each other's health votes as Node's heartbeats
// carry them: from live directors that vote, with a change signalled.
func TestFakeHealthVotes(t *testing.T) {
	f := NewFake(Rules{Mode: ECMP, Quorum: 1}, vip1)
	a, b := f.Add("a", 100), f.Add("b", 100)
	if v := a.HealthVotes(); len(v) != 0 {
		t.Errorf("votes %v before anyone voted, want none", v)
	}
	b.ShareHealth([]uint64{7})
	if !signalled(a.HealthVotesChanged()) || signalled(b.HealthVotesChanged()) {
		t.Error("b's vote: a not told, or b told of its own vote")
	}
	if v := a.HealthVotes(); !maps.EqualFunc(v, Votes{"b": {7: true}}, maps.Equal) {
		t.Errorf("a hears %v, want b's vote for 7", v)
	}
	if v := b.HealthVotes(); len(v) != 0 {
		t.Errorf("b hears %v: its own vote is no peer's", v)
	}
	b.ShareHealth([]uint64{7})
	if signalled(a.HealthVotesChanged()) {
		t.Error("the same vote again signalled a change")
	}
	f.SetUp("b", false)
	if !signalled(a.HealthVotesChanged()) || len(a.HealthVotes()) != 0 {
		t.Errorf("b failed: a hears %v, want no vote", a.HealthVotes())
	}
	f.SetUp("b", true)
	drain(a.HealthVotesChanged())
	b.ShareHealth(nil)
	if !signalled(a.HealthVotesChanged()) || len(a.HealthVotes()) != 0 {
		t.Errorf("b abstains: a hears %v, want no vote", a.HealthVotes())
	}
}
