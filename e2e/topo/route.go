package topo

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Nexthops returns the gateways of the route to prefix in the host's main
// table, sorted; none when there is no such route. It reads what `ip -n
// NS route show PREFIX` shows, in-process (an exec costs 0.1–0.5 s under
// TCG).
func (h *Host) Nexthops(prefix netip.Prefix) ([]netip.Addr, error) {
	family := netlink.FAMILY_V4
	if prefix.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	filter := &netlink.Route{Dst: ipNet(prefix.Masked()), Table: unix.RT_TABLE_MAIN}
	routes, err := h.handle().RouteListFiltered(family, filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("%v: route %s: %w", h, prefix, err)
	}
	var out []netip.Addr
	for _, r := range routes {
		out = append(out, gateways(r)...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func gateways(r netlink.Route) []netip.Addr {
	var out []netip.Addr
	if ip, ok := netip.AddrFromSlice(r.Gw); ok {
		out = append(out, ip.Unmap())
	}
	for _, nh := range r.MultiPath {
		if ip, ok := netip.AddrFromSlice(nh.Gw); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// WaitNexthops polls (every 50 ms) until the route to prefix has exactly n
// gateways (0: no route) and returns them.
func (h *Host) WaitNexthops(ctx context.Context, prefix netip.Prefix, n int) ([]netip.Addr, error) {
	for {
		got, err := h.Nexthops(prefix)
		if err != nil {
			return nil, err
		}
		if len(got) == n {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, fmt.Errorf("%v: route %s has %d nexthops %v, want %d: %w", h, prefix, len(got), got, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RouteEvent is a change of a watched route: its gateways after the
// change (none: removed), stamped when the kernel's notification arrived.
type RouteEvent struct {
	At       time.Time
	Nexthops []netip.Addr
}

// WatchRoute reports every change of the route to prefix in the host's
// main table, as `ip -ts monitor route` shows them, until ctx ends. The
// first event is the route as it is now.
func (h *Host) WatchRoute(ctx context.Context, prefix netip.Prefix) (<-chan RouteEvent, error) {
	prefix = prefix.Masked()
	updates := make(chan netlink.RouteUpdate, 256)
	done := make(chan struct{})
	opts := netlink.RouteSubscribeOptions{}
	if h != nil {
		opts.Namespace = &h.ns
	}
	if err := netlink.RouteSubscribeWithOptions(updates, done, opts); err != nil {
		return nil, fmt.Errorf("%v: watching routes: %w", h, err)
	}
	out := make(chan RouteEvent, 256)
	first, err := h.Nexthops(prefix)
	if err != nil {
		close(done)
		return nil, err
	}
	out <- RouteEvent{At: time.Now(), Nexthops: first}
	go func() {
		defer close(out)
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				at := time.Now()
				if u.Dst == nil || u.Table != unix.RT_TABLE_MAIN {
					continue
				}
				dst, ok := netip.AddrFromSlice(u.Dst.IP)
				ones, _ := u.Dst.Mask.Size()
				if !ok || netip.PrefixFrom(dst.Unmap(), ones) != prefix {
					continue
				}
				ev := RouteEvent{At: at}
				if u.Type == unix.RTM_NEWROUTE {
					ev.Nexthops = gateways(u.Route)
					slices.SortFunc(ev.Nexthops, netip.Addr.Compare)
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
