package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp"
)

// interfaces follows the interfaces the VIPs name besides the director's
// own (a service's interface, a NAT gateway's on the real servers' side):
// a VIP whose interface cannot carry traffic is not served, so the cluster
// gives it to a director whose can, while the director's other VIPs stay.
// The director's own interface grounds every VIP instead (TrackLink).
// Owned by the holder's goroutine but for the watches, which only send.
type interfaces struct {
	ctx     context.Context // the watches end with it
	watcher arp.LinkWatcher
	changes chan linkChange // every watch's changes, to the holder's loop
	watches map[string]context.CancelFunc
	down    map[string]bool // followed interfaces that cannot carry traffic now (missing ones included)
}

// linkChange is a state of one interface.
type linkChange struct {
	dev string
	up  bool
}

// firstStateWait bounds how long a new watch waits for an interface's
// first state; past it the interface counts as up (as when untracked).
const firstStateWait = 2 * time.Second

// TrackInterfaces makes the holder follow the state of every interface
// its VIPs name besides the director's own, through w, until ctx ends: a
// VIP is served only while all of its interfaces can carry traffic (a
// missing interface counts as down: the VIP waits for it). Call it before
// Start.
func (h *Holder) TrackInterfaces(ctx context.Context, w arp.LinkWatcher) {
	h.ifaces = &interfaces{ctx: ctx, watcher: w, changes: make(chan linkChange, 16),
		watches: map[string]context.CancelFunc{}, down: map[string]bool{}}
}

// interfaceChanges are the followed interfaces' changes (nil: none followed).
func (h *Holder) interfaceChanges() <-chan linkChange {
	if h.ifaces == nil {
		return nil
	}
	return h.ifaces.changes
}

// named lists the interfaces the VIPs of d name besides its Interface and
// VIPDevice, sorted.
func named(d planner.Desired) []string {
	var out []string
	for _, dev := range d.Devices() {
		if dev != d.Interface && dev != d.VIPDevice && dev != planner.Loopback {
			out = append(out, dev)
		}
	}
	return out
}

// watchInterfaces follows the interfaces the programmed VIPs name and
// stops following the others. It reads each new interface's first state
// before it returns, so a VIP on a missing or down interface is never
// served for a moment.
func (h *Holder) watchInterfaces() {
	t := h.ifaces
	if t == nil {
		return
	}
	want := named(h.prog.Desired)
	for dev, cancel := range t.watches {
		if !slices.Contains(want, dev) {
			cancel()
			delete(t.watches, dev)
			delete(t.down, dev)
		}
	}
	for _, dev := range want {
		if _, ok := t.watches[dev]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(t.ctx)
		states, err := t.watcher.WatchLink(ctx, dev)
		if err != nil {
			cancel()
			h.log.Error("cannot follow an interface's state; its VIPs stay even when it goes down", "interface", dev, "err", err)
			continue
		}
		t.watches[dev] = cancel
		select {
		case up, ok := <-states:
			t.down[dev] = ok && !up
		case <-time.After(firstStateWait):
			h.log.Warn("no state of the interface yet; serving its VIPs until it says down", "interface", dev)
		}
		if t.down[dev] {
			h.log.Warn("interface down or missing: not serving its VIPs", "interface", dev)
		}
		go forwardStates(ctx, dev, states, t.changes)
	}
}

// forwardStates hands dev's states to the holder's loop until ctx ends.
func forwardStates(ctx context.Context, dev string, states <-chan bool, to chan<- linkChange) {
	for up := range states {
		select {
		case to <- linkChange{dev, up}:
		case <-ctx.Done():
			return
		}
	}
}

// interfaceChanged takes in a followed interface's state and serves and
// holds what the director can now.
func (h *Holder) interfaceChanged(ctx context.Context, c linkChange) ([]planner.Op, error) {
	t := h.ifaces
	if _, followed := t.watches[c.dev]; !followed || t.down[c.dev] == !c.up {
		return nil, nil // stale: no longer followed, or no change
	}
	t.down[c.dev] = !c.up
	if c.up {
		h.log.Info("interface up: serving its VIPs again", "interface", c.dev)
	} else {
		h.log.Warn("interface down: giving its VIPs up", "interface", c.dev)
	}
	h.publish()
	if !h.synced {
		return nil, nil
	}
	h.serve()
	return h.pass(ctx)
}

// cannotServe reports whether an interface v names is down.
func (h *Holder) cannotServe(v planner.VIPAddresses) bool {
	if h.ifaces == nil {
		return false
	}
	for _, dev := range v.Interfaces {
		if h.ifaces.down[dev] {
			return true
		}
	}
	return false
}

// interfacesDown says which followed interfaces are down, for State: "" when none.
func (h *Holder) interfacesDown() string {
	if h.ifaces == nil {
		return ""
	}
	var down []string
	for dev, d := range h.ifaces.down {
		if d {
			down = append(down, dev)
		}
	}
	slices.Sort(down)
	return strings.Join(down, ", ")
}

// servable reports whether the director may serve vip now.
func (h *Holder) servable(v planner.VIPAddresses) bool {
	return !h.grounded() && !h.cannotServe(v)
}

// listPresent lists the addresses of d's devices. A missing device has
// none: a VIP waits for its interface without holding up the others.
func listPresent(ctx context.Context, k Kernel, d planner.Desired) (map[string][]netip.Prefix, error) {
	out := map[string][]netip.Prefix{}
	for _, dev := range d.Devices() {
		ps, err := k.Addrs.List(ctx, dev)
		if err != nil && !(errors.Is(err, arp.ErrNotFound) && dev != d.Interface) {
			return nil, err
		}
		out[dev] = ps
	}
	return out, nil
}
