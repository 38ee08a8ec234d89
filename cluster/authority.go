package cluster

import (
	"net/netip"
	"sync"
	"time"
)

// releaseGrace is how long a director that stopped claiming a VIP may still
// send connection records of it: the kernel's master daemon holds a lone
// record back for up to 2 s (docs/cluster.md, Limits), and a record sent
// before the release can arrive after the heartbeat saying so (memberlist
// hands queued messages over newest first).
const releaseGrace = 3 * time.Second

// authority is who holds which VIP as the heartbeats this director used
// say, for connection sync: a director may send records only of the VIPs
// it holds (MaySend). The loop updates it from onHeartbeat; the relay
// reads it from its own goroutine.
type authority struct {
	mu sync.Mutex // guards claims
	// claims maps a director to the VIPs it claims to hold: the zero time
	// while it does, else when it stopped (kept for releaseGrace).
	claims map[string]map[netip.Addr]time.Time
}

// set records name's claims as of its heartbeat received at at; nil: it
// holds nothing (it left or restarted).
func (a *authority) set(name string, claims map[netip.Addr]bool, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.claims == nil {
		a.claims = map[string]map[netip.Addr]time.Time{}
	}
	cur := a.claims[name]
	if cur == nil {
		cur = map[netip.Addr]time.Time{}
		a.claims[name] = cur
	}
	for vip, since := range cur {
		switch {
		case claims[vip]:
		case since.IsZero():
			cur[vip] = at // released now
		case at.Sub(since) > releaseGrace:
			delete(cur, vip)
		}
	}
	for vip, held := range claims {
		if held {
			cur[vip] = time.Time{}
		}
	}
	if len(cur) == 0 {
		delete(a.claims, name)
	}
}

func (a *authority) maySend(sender string, vip netip.Addr, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	since, ok := a.claims[sender][vip.Unmap()]
	return ok && (since.IsZero() || now.Sub(since) <= releaseGrace)
}

// MaySend reports whether sender may send connection records of vip: it
// claimed to hold vip in its last heartbeat this director used, or did
// until less than releaseGrace ago. It implements connsync.Authority. Under
// ECMP every ready director holds (and claims) every VIP it serves, so the
// same answer holds: any ready member may send records of any VIP.
func (n *Node) MaySend(sender string, vip netip.Addr) bool {
	return n.auth.maySend(sender, vip, time.Now())
}

// Name is this director's name in the cluster, which its connection-sync
// messages carry (connsync.Transport).
func (n *Node) Name() string { return n.cfg.Name }
