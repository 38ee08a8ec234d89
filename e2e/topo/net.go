package topo

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// handle returns the netlink handle for the host's namespace; for a nil
// Host a handle that opens a socket per request in the calling thread's
// namespace, which for an unlocked goroutine is the original one.
func (h *Host) handle() *netlink.Handle {
	if h == nil {
		return &netlink.Handle{}
	}
	return h.nl
}

// link returns the named device, or the host's Link for dev "".
func (h *Host) link(dev string) (netlink.Link, error) {
	if dev == "" {
		if h == nil {
			return nil, fmt.Errorf("root netns: no default device; name one")
		}
		dev = h.Link
	}
	l, err := h.handle().LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("%v: link %s: %w", h, dev, err)
	}
	return l, nil
}

// AddAddr adds an address to dev ("" means the host's Link; "lo" is where
// DR real servers hold VIPs). IPv6 addresses are added without DAD, and on
// a running link AddAddr returns only once the kernel has finished setting
// the address up (local route, solicited-node group), so it answers at once.
func (h *Host) AddAddr(prefix netip.Prefix, dev string) error {
	l, err := h.link(dev)
	if err != nil {
		return err
	}
	if err := h.addAddr(l, prefix); err != nil {
		return err
	}
	// The kernel finishes IPv6 addresses asynchronously, and only on a
	// running link (see waitReady).
	const up = net.FlagUp | net.FlagRunning
	if f := l.Attrs().Flags; prefix.Addr().Is6() && h != nil && f&up == up {
		return h.waitUsable6(l.Attrs().Name, f&net.FlagLoopback == 0, prefix.Addr())
	}
	return nil
}

func (h *Host) addAddr(l netlink.Link, prefix netip.Prefix) error {
	a := &netlink.Addr{IPNet: ipNet(prefix)}
	if prefix.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.handle().AddrAdd(l, a); err != nil {
		return fmt.Errorf("%v: add %s to %s: %w", h, prefix, l.Attrs().Name, err)
	}
	return nil
}

// DelAddr removes an address from dev ("" means the host's Link).
func (h *Host) DelAddr(prefix netip.Prefix, dev string) error {
	l, err := h.link(dev)
	if err != nil {
		return err
	}
	if err := h.handle().AddrDel(l, &netlink.Addr{IPNet: ipNet(prefix)}); err != nil {
		return fmt.Errorf("%v: delete %s from %s: %w", h, prefix, l.Attrs().Name, err)
	}
	return nil
}

// AddRoute adds or replaces a route to dst via gw on the host's Link; an
// invalid (zero) gw makes dst on-link. For NAT tests (see the package
// documentation), e.g. on a real server: AddRoute(10.0.0.96/27, director)
// and AddRoute(10.0.0.128/30, director) cover the default 32 sources; the
// director also wants send_redirects=0.
func (h *Host) AddRoute(dst netip.Prefix, gw netip.Addr) error {
	l, err := h.link("")
	if err != nil {
		return err
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(dst.Masked())}
	if gw.IsValid() {
		r.Gw = gw.AsSlice()
	} else {
		r.Scope = netlink.SCOPE_LINK
	}
	if err := h.handle().RouteReplace(r); err != nil {
		return fmt.Errorf("%v: route %s via %s: %w", h, dst, gw, err)
	}
	return nil
}

// DelRoute removes the route to dst from the main table.
func (h *Host) DelRoute(dst netip.Prefix) error {
	r := &netlink.Route{Dst: ipNet(dst.Masked())}
	if err := h.handle().RouteDel(r); err != nil {
		return fmt.Errorf("%v: delete route %s: %w", h, dst, err)
	}
	return nil
}

// SetDefaultRoute sets (replaces) the default route of gw's family.
func (h *Host) SetDefaultRoute(gw netip.Addr) error {
	dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	if gw.Is6() {
		dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return h.AddRoute(dst, gw)
}

// SetPort brings the host's bridge port up or down: down cuts the cable
// (the host keeps running but neither sends nor receives), the way director
// failure is simulated without killing anything. Up returns once the port
// forwards again. Peers that tried to reach the host meanwhile may hold an
// unresolved neighbour entry and only retry on their next probe (≤ 1 s).
func (h *Host) SetPort(up bool) error {
	root, err := rootHandle()
	if err != nil {
		return err
	}
	defer root.Close()
	l, err := root.LinkByName(h.Port)
	if err != nil {
		return err
	}
	if !up {
		return root.LinkSetDown(l)
	}
	if err := root.LinkSetUp(l); err != nil {
		return err
	}
	return waitReady(h)
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
