package cluster

import (
	"bytes"
	"crypto/sha256"
	"maps"
	"net/netip"
	"slices"
)

// Mode says how VIPs are spread over the directors.
type Mode string

// Modes.
const (
	// ActiveStandby: the live director with the highest priority (then the
	// lowest name) holds every VIP.
	ActiveStandby Mode = "active-standby"
	// ActiveActive: each VIP is held by the live director ranked first for
	// it by sha256(name + "#" + vip), as MetalLB ranks speakers, so the VIPs
	// spread and a failure moves only the failed director's VIPs.
	ActiveActive Mode = "active-active"
	// ECMP: every director holds every VIP it serves at once and announces
	// it over BGP; the routers spread the flows (docs/ecmp.md). Nothing is
	// exclusive, so there is no handover, no quorum and no conflict: a
	// director holds its VIPs while it runs and is past its start-up hold.
	ECMP Mode = "ecmp"
)

// Rules are the cluster-wide settings ownership depends on. Every director
// must run with the same ones.
type Rules struct {
	Mode Mode
	// Preempt lets the best director take a VIP from a live holder; without
	// it a live holder keeps its VIPs (fewer moves, less balance).
	Preempt bool
	// Quorum is how many live directors, this one included, a director
	// must see to hold any VIP.
	Quorum int
	// Homes are, under ECMP, addresses only one director may hold at a
	// time, keyed like VIPs, with the director each belongs to: a
	// director's FULLNAT source addresses. The home holds them while it is
	// ready; when it is lost they go to the survivor ranked first (as in
	// active-active), and back to the home when it returns.
	Homes map[netip.Addr]string
}

// Candidate is a live director as the ownership rules see it.
type Candidate struct {
	Name     string
	Priority int
	// Ready is false during the start-up hold: the director counts towards
	// the quorum but may not own VIPs yet (it has not heard everyone).
	Ready bool
	// Pending marks a director that is not ready yet but will be soon (it
	// started less than a start-up hold ago, with this one): a VIP it
	// would own is not taken by another meanwhile, so directors starting
	// together do not both take a VIP for a moment.
	Pending bool
	// Presence says how this director hears it.
	Presence Presence
	// VIPs are the VIPs it is configured for, each with whether it holds
	// (claims) it now.
	VIPs map[netip.Addr]bool
}

// Presence is how a director hears a candidate.
type Presence int

const (
	// Live: heard within half a failure timeout (itself always).
	Live Presence = iota
	// Unsure: a live director not heard for half a failure timeout: it
	// still owns and counts, but not towards the quorum needed to take a
	// VIP. A director being cut off sees all its peers go quiet, and the
	// first of them fails a moment before the others.
	Unsure
	// Rising: heard again but not yet for the rise time: it owns nothing,
	// but what it claims is not taken from it (after a partition heals it
	// may still hold VIPs).
	Rising
	// Lingering: silent for longer than the failure timeout but not yet
	// for twice that: it owns nothing and its claims are void, but it
	// still counts for the quorum. A director whose own receiving was held
	// up hears nobody for a moment; it must not drop every VIP for that,
	// while a real partition still costs the minority its VIPs within two
	// failure timeouts.
	Lingering
)

// rank orders directors for one VIP: lower ranks first.
func rank(name string, vip netip.Addr) [sha256.Size]byte {
	return sha256.Sum256([]byte(name + "#" + vip.String()))
}

// An ordering is how an ownership mode ranks the directors for one VIP:
// the VIP goes to the first live one. It must depend only on the two
// directors compared, so any two that see each other agree on it whatever
// else they see.
type ordering interface {
	before(vip netip.Addr, a, b *Candidate) bool
}

// byPriority is active-standby: higher priority, then lower name.
type byPriority struct{}

func (byPriority) before(_ netip.Addr, a, b *Candidate) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Name < b.Name
}

// byRank is active-active: the lower sha256 rank, then lower name.
type byRank struct{}

func (byRank) before(vip netip.Addr, a, b *Candidate) bool {
	ra, rb := rank(a.Name, vip), rank(b.Name, vip)
	if c := bytes.Compare(ra[:], rb[:]); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

// orderings are the modes' orderings.
var orderings = map[Mode]ordering{ActiveStandby: byPriority{}, ActiveActive: byRank{}}

// before reports whether a beats b for vip in r's mode (active-standby for
// an unknown one).
func (r Rules) before(vip netip.Addr, a, b *Candidate) bool {
	if home, ok := r.Homes[vip]; ok {
		if (a.Name == home) != (b.Name == home) {
			return a.Name == home
		}
		return byRank{}.before(vip, a, b)
	}
	o, ok := orderings[r.Mode]
	if !ok {
		o = byPriority{}
	}
	return o.before(vip, a, b)
}

// Owners returns the owner of each vip in the view live (every director
// this one counts, itself included: live, rising and lingering ones). A VIP has no owner ("") without a
// quorum or when no ready director is configured for it.
func Owners(r Rules, live []Candidate, vips []netip.Addr) map[netip.Addr]string {
	out := make(map[netip.Addr]string, len(vips))
	if len(live) < r.Quorum {
		return out
	}
	for _, vip := range vips {
		if _, home := r.Homes[vip]; r.Mode == ECMP && !home {
			continue // no single owner (the holders are the answer)
		}
		if o := owner(r, live, vip); o != nil {
			out[vip] = o.Name
		}
	}
	return out
}

func owner(r Rules, live []Candidate, vip netip.Addr) *Candidate {
	var best, bestHolder *Candidate
	for i := range live {
		c := &live[i]
		held, configured := c.VIPs[vip]
		if !c.Ready || c.Presence == Rising || c.Presence == Lingering || !configured {
			continue
		}
		if best == nil || r.before(vip, c, best) {
			best = c
		}
		if held && (bestHolder == nil || r.before(vip, c, bestHolder)) {
			bestHolder = c
		}
	}
	if home, ok := r.Homes[vip]; ok && best != nil && best.Name == home {
		return best // the home ranks first while it is ready, and takes its addresses back
	}
	if !r.Preempt && bestHolder != nil {
		return bestHolder
	}
	return best
}

// Step is what one director should hold next, given its current holdings
// and its view.
type Step struct {
	Hold map[netip.Addr]bool
	// Waiting are VIPs this director owns but does not take yet because
	// another live director still claims them: it takes them once that
	// one has let go, so no VIP is on two directors during a handover.
	Waiting []netip.Addr
	// Conflicts are VIPs this director holds that another live director
	// holds too (after a partition healed); the one ranked lower lets go.
	Conflicts []netip.Addr
}

// Next decides what self holds next. live is the view, self included (its
// VIPs flag what it holds now), with rising and lingering directors; vips
// are the VIPs self is configured for.
//
// A VIP is kept while self owns it and no other live holder ranks before
// self, and released otherwise; without a quorum (counting rising and
// lingering directors) everything is released. A VIP is taken when self
// owns it, no director it hears claims it, and the quorum holds without
// the rising, lingering and unsure directors: a director cut off from the
// others keeps its own VIPs for a second failure timeout, but never takes
// theirs.
func Next(r Rules, self string, live []Candidate, vips []netip.Addr) Step {
	st := Step{Hold: map[netip.Addr]bool{}}
	i := slices.IndexFunc(live, func(c Candidate) bool { return c.Name == self })
	if r.Mode == ECMP {
		var homed []netip.Addr
		for _, v := range vips {
			if _, ok := r.Homes[v]; ok {
				homed = append(homed, v)
			} else if i >= 0 && live[i].Ready {
				st.Hold[v] = true
			}
		}
		if len(homed) == 0 {
			return st
		}
		// One holder at a time, handed over as in active-active; the home
		// takes its addresses back when it returns, and keeps them without
		// a quorum (its connections need them, and nobody else may take
		// them without one). A survivor keeps what it took while the home
		// is away: moving the addresses costs their connections a moment.
		own, others := homed[:0:0], homed[:0:0]
		for _, v := range homed {
			if r.Homes[v] == self {
				own = append(own, v)
			} else {
				others = append(others, v)
			}
		}
		for _, part := range []struct {
			vips   []netip.Addr
			quorum int
		}{{own, 1}, {others, r.Quorum}} {
			h := Rules{Mode: ActiveActive, Quorum: part.quorum, Homes: r.Homes}
			sub := Next(h, self, live, part.vips)
			maps.Copy(st.Hold, sub.Hold)
			st.Waiting, st.Conflicts = append(st.Waiting, sub.Waiting...), append(st.Conflicts, sub.Conflicts...)
		}
		return st
	}
	if i < 0 || len(live) < r.Quorum {
		return st
	}
	mayTake := settled(live) >= r.Quorum
	me := &live[i]
	for _, vip := range vips {
		o := owner(r, live, vip)
		if o == nil || o.Name != self {
			continue
		}
		var other, better bool
		for j := range live {
			c := &live[j]
			if j == i || c.Presence == Lingering || !c.VIPs[vip] {
				continue
			}
			other = true
			better = better || c.Presence != Rising && r.before(vip, c, me)
		}
		switch {
		case me.VIPs[vip] && other:
			st.Conflicts = append(st.Conflicts, vip)
			if !better {
				st.Hold[vip] = true
			}
		case me.VIPs[vip]:
			st.Hold[vip] = true
		case other || pendingBefore(r, vip, me, live):
			st.Waiting = append(st.Waiting, vip)
		case mayTake:
			st.Hold[vip] = true
		}
	}
	return st
}

// settled counts the directors that are neither rising, lingering nor
// unsure.
func settled(live []Candidate) int {
	k := 0
	for _, c := range live {
		if c.Presence == Live {
			k++
		}
	}
	return k
}

// pendingBefore reports whether a pending director configured for vip
// ranks before me.
func pendingBefore(r Rules, vip netip.Addr, me *Candidate, live []Candidate) bool {
	for i := range live {
		c := &live[i]
		if _, configured := c.VIPs[vip]; c.Pending && !c.Ready && configured && r.before(vip, c, me) {
			return true
		}
	}
	return false
}
