package cluster

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sync"
)

// Fake is an in-memory cluster for agent tests: directors that all see the
// same live set and decide with the same rules as Node (Owners, Next), with
// handovers done at once, and hear each other's health votes as Node's
// heartbeats carry them. Each director's side is a FakeNode, which
// implements what the agent and the director use of a Node. Methods are
// safe for concurrent use.
type Fake struct {
	mu    sync.Mutex // guards all following fields
	rules Rules
	vips  []netip.Addr
	nodes []*FakeNode
}

// FakeNode is one director of a Fake.
type FakeNode struct {
	f        *Fake
	name     string
	priority int
	up       bool
	held     map[netip.Addr]bool // guarded by f.mu
	served   []netip.Addr        // guarded by f.mu; nil: every VIP of the cluster
	present  map[netip.Addr]bool // guarded by f.mu
	down     map[uint64]bool     // guarded by f.mu: its health vote (ShareHealth); nil: abstains
	config   *ConfigDigest       // guarded by f.mu: what AdvertiseConfig set
	changed  chan struct{}
	voted    chan struct{} // HealthVotesChanged
}

// NewFake returns a cluster without directors deciding about vips.
func NewFake(rules Rules, vips ...netip.Addr) *Fake {
	return &Fake{rules: rules, vips: slices.Clone(vips)}
}

// Add adds a live director and redistributes the VIPs.
func (f *Fake) Add(name string, priority int) *FakeNode {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &FakeNode{f: f, name: name, priority: priority, up: true, held: map[netip.Addr]bool{},
		present: map[netip.Addr]bool{}, changed: make(chan struct{}, 1), voted: make(chan struct{}, 1)}
	f.nodes = append(f.nodes, n)
	f.recompute()
	return n
}

// Node returns the director called name, or nil.
func (f *Fake) Node(name string) *FakeNode {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// SetUp fails a director (up false: it holds nothing and the others take
// its VIPs) or brings it back.
func (f *Fake) SetUp(name string, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n.name == name && n.up != up {
			n.up = up
			if n.down != nil {
				f.votesChanged(n) // a failed director stops counting as a voter
			}
		}
	}
	f.recompute()
}

// votesChanged tells every director but from that the votes changed;
// f.mu is held.
func (f *Fake) votesChanged(from *FakeNode) {
	for _, n := range f.nodes {
		if n != from {
			notify(n.voted)
		}
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// SetVIPs replaces the VIPs the cluster decides about.
func (f *Fake) SetVIPs(vips ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vips = slices.Clone(vips)
	f.recompute()
}

// Owner returns the director holding vip, or "".
func (f *Fake) Owner(vip netip.Addr) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n.held[vip] {
			return n.name
		}
	}
	return ""
}

// recompute lets every live director take its next step until nothing
// changes; f.mu is held.
func (f *Fake) recompute() {
	for range 2 * len(f.nodes) {
		var live []Candidate
		for _, n := range f.nodes {
			if !n.up {
				continue
			}
			claims := map[netip.Addr]bool{}
			for _, v := range f.vips {
				if n.serves(v) {
					claims[v] = n.held[v]
				}
			}
			live = append(live, Candidate{Name: n.name, Priority: n.priority, Ready: true, VIPs: claims})
		}
		moved := false
		for _, n := range f.nodes {
			next := map[netip.Addr]bool{}
			if n.up {
				next = Next(f.rules, n.name, live, slices.DeleteFunc(slices.Clone(f.vips), func(v netip.Addr) bool { return !n.serves(v) })).Hold
			}
			if !maps.Equal(next, n.held) {
				n.held, moved = next, true
				notify(n.changed)
			}
		}
		if !moved {
			return
		}
	}
}

// serves reports whether the director serves v; f.mu is held.
func (n *FakeNode) serves(v netip.Addr) bool { return n.served == nil || slices.Contains(n.served, v) }

// Serve implements the agent's VIPOwnership.
func (n *FakeNode) Serve(vips []netip.Addr) {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	n.served = append([]netip.Addr{}, vips...)
	n.f.recompute()
}

// ServeHomes sets the cluster's Rules.Homes (every director's agent gives
// the same) and redistributes.
func (n *FakeNode) ServeHomes(homes map[netip.Addr]string) {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	n.f.rules.Homes = maps.Clone(homes)
	n.f.recompute()
}

// Holds implements the agent's VIPOwnership.
func (n *FakeNode) Holds(vip netip.Addr) bool {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	return n.held[vip]
}

// AddressChanged implements the agent's VIPOwnership.
func (n *FakeNode) AddressChanged(addr netip.Addr, present bool) {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	n.present[addr] = present
}

// Changed implements the agent's VIPOwnership.
func (n *FakeNode) Changed() <-chan struct{} { return n.changed }

// ShareHealth makes the director vote, as Node.ShareHealth does: down are
// the targets it sees down; nil, or more than MaxDown: it abstains. The
// other directors hear it at once.
func (n *FakeNode) ShareHealth(down []uint64) {
	var vote map[uint64]bool
	if down != nil && len(down) <= MaxDown {
		vote = make(map[uint64]bool, len(down))
		for _, id := range down {
			vote[id] = true
		}
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	if vote == nil && n.down == nil || vote != nil && n.down != nil && maps.Equal(vote, n.down) {
		return
	}
	n.down = vote
	n.f.votesChanged(n)
}

// HealthVotes returns the votes of the other live directors that vote, as
// Node.HealthVotes does; empty while none does (as in every mode but ecmp,
// where no director votes).
func (n *FakeNode) HealthVotes() Votes {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	votes := Votes{}
	for _, m := range n.f.nodes {
		if m != n && m.up && m.down != nil {
			votes[m.name] = maps.Clone(m.down)
		}
	}
	return votes
}

// HealthVotesChanged delivers a value when HealthVotes may have changed.
func (n *FakeNode) HealthVotesChanged() <-chan struct{} { return n.voted }

// Name is the member's name.
func (n *FakeNode) Name() string { return n.name }

// MaySend reports whether sender holds vip now, as Node.MaySend does from
// the heartbeats (without its release grace).
func (n *FakeNode) MaySend(sender string, vip netip.Addr) bool {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	for _, m := range n.f.nodes {
		if m.name == sender {
			return m.up && m.held[vip]
		}
	}
	return false
}

// AdvertiseConfig records the director's configuration, which the other
// directors' views compare with theirs at once (Node needs a heartbeat or
// a rotation of runs).
func (n *FakeNode) AdvertiseConfig(d *ConfigDigest) {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	n.config = d
}

// fakeConfigView compares theirs with mine as Node's view does once every
// service was compared, a change held in mine included.
func fakeConfigView(mine, theirs *ConfigDigest, ecmp bool) *ConfigView {
	switch {
	case mine == nil:
		return nil
	case theirs == nil || theirs.Scheme != mine.Scheme:
		return &ConfigView{Match: ConfigUnknown}
	case theirs.Sum == mine.Sum:
		return &ConfigView{Match: ConfigSame}
	}
	var names []string
	for name, sum := range theirs.byName {
		if s, ok := mine.byName[name]; !ok || s != sum {
			names = append(names, name)
		}
	}
	for name := range mine.byName {
		if _, ok := theirs.byName[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	held := mine.inForce != nil // differs only by the change held here, as Node's compareConfig tells
	for _, name := range names {
		sum, has := theirs.byName[name]
		held = held && mine.inForceIs(name, sum, has)
	}
	return &ConfigView{Match: ConfigDifferent, Services: names[:min(len(names), maxDriftShown)], Differing: len(names),
		Compared: true, Held: held, FlowsAtRisk: ecmp && !held}
}

// Served returns the VIPs the agent said it serves (nil: never said).
func (n *FakeNode) Served() []netip.Addr {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	return slices.Clone(n.served)
}

// Present returns the addresses the agent reported on its interface.
func (n *FakeNode) Present() map[netip.Addr]bool {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	return maps.Clone(n.present)
}

// View returns the director's view in the shape Node.View has.
func (n *FakeNode) View(context.Context) (View, error) {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	v := View{Node: n.name, Mode: f.rules.Mode, Preempt: f.rules.Preempt, Encrypted: true, Quorum: f.rules.Quorum, State: "standby"}
	if !n.up {
		v.State = "no-quorum"
	} else if len(n.held) > 0 {
		v.State = "active"
	}
	live := 0
	for _, o := range f.nodes {
		if o.up {
			live++
		}
	}
	v.Live = live
	if n.config != nil {
		v.ConfigDigest, v.ConfigServices = n.config.String(), n.config.Services()
	}
	for _, o := range f.nodes {
		m := MemberView{Name: o.name, Self: o == n, Priority: o.priority, Gossip: "alive", Live: o.up, Ready: o.up, Holds: held(o.held)}
		if !o.up {
			m.Gossip = "failed"
		}
		if o != n {
			m.Config = fakeConfigView(n.config, o.config, f.rules.Mode == ECMP && o.up)
		}
		if o == n {
			v.Members = append([]MemberView{m}, v.Members...)
		} else {
			v.Members = append(v.Members, m)
		}
	}
	for _, vip := range f.vips {
		vv := VIPView{VIP: vip.String(), Held: n.held[vip]}
		for _, o := range f.nodes {
			if o.held[vip] {
				vv.Owner, vv.Holders = o.name, append(vv.Holders, o.name)
			}
		}
		v.VIPs = append(v.VIPs, vv)
	}
	return v, nil
}
