package topo

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AddLAN creates a bridge with no router: a network the caller plugs
// hosts into (Segment.Plug, Segment.AddHost), e.g. the real servers'
// side of two-armed directors. Its hosts get no default route; the
// caller sets what the test needs.
func (tp *Topology) AddLAN() (*Segment, error) {
	s, _, err := tp.newSegment(nil, nil)
	return s, err
}

// newSegment creates the bridge of a new segment (router and gateways only
// recorded) and returns it with the hosts on the topology's bridge now.
func (tp *Topology) newSegment(router *Host, gateways []netip.Prefix) (*Segment, []*Host, error) {
	tp.mu.Lock()
	if tp.closed {
		tp.mu.Unlock()
		return nil, nil, fmt.Errorf("topology %s is closed", tp.Prefix)
	}
	tp.segments++
	n := tp.segments
	hosts := append([]*Host(nil), tp.hosts...)
	tp.mu.Unlock()

	s := &Segment{Bridge: tp.Prefix + "-s" + strconv.Itoa(n), Router: router, tp: tp, gateways: gateways}
	la := netlink.NewLinkAttrs()
	la.Name = s.Bridge
	la.Group = tp.group
	la.Flags = unix.IFF_UP
	off := false
	if err := tp.root.LinkAdd(&netlink.Bridge{LinkAttrs: la, MulticastSnooping: &off}); err != nil {
		return nil, nil, fmt.Errorf("create bridge %s: %w", s.Bridge, err)
	}
	br, err := tp.root.LinkByName(s.Bridge)
	if err != nil {
		return nil, nil, err
	}
	s.bridge = br
	tp.mu.Lock()
	tp.extraBridges = append(tp.extraBridges, br)
	tp.mu.Unlock()
	return s, hosts, nil
}

// Plug gives an existing host a second interface dev on the segment with
// addrs, and returns once it can talk. Its MAC is 02:01:<first IPv4
// address> (the kernel's choice without one), so traces tell it from the
// host's Link.
func (s *Segment) Plug(h *Host, dev string, addrs ...netip.Prefix) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	for _, p := range addrs {
		if p.Addr().Is4() {
			a := p.Addr().As4()
			mac = net.HardwareAddr{0x02, 0x01, a[0], a[1], a[2], a[3]}
			break
		}
	}
	s.tp.mu.Lock()
	s.plugs++
	port := s.Bridge + "-p" + strconv.Itoa(s.plugs)
	s.tp.mu.Unlock()
	link, err := s.tp.plug(h, dev, port, mac, s.bridge, addrs)
	if err != nil {
		return nil, fmt.Errorf("%v on %s: %w", h, s.Bridge, err)
	}
	if err := poll(readyDeadline(), h, func() (bool, string) { return h.linkReady(port, dev) }); err != nil {
		return nil, err
	}
	return link.Attrs().HardwareAddr, nil
}

// AddVLAN creates the 802.1Q interface parent.id on h with addrs, up, and
// returns its name. It shares parent's MAC; the bridge carries the tagged
// frames to every host with a VLAN of the same id.
func (h *Host) AddVLAN(parent string, id int, addrs ...netip.Prefix) (string, error) {
	p, err := h.link(parent)
	if err != nil {
		return "", err
	}
	la := netlink.NewLinkAttrs()
	la.Name = p.Attrs().Name + "." + strconv.Itoa(id)
	la.ParentIndex = p.Attrs().Index
	if err := h.handle().LinkAdd(&netlink.Vlan{LinkAttrs: la, VlanId: id}); err != nil {
		return "", fmt.Errorf("%v: add vlan %s: %w", h, la.Name, err)
	}
	l, err := h.link(la.Name)
	if err != nil {
		return "", err
	}
	if err := h.handle().LinkSetUp(l); err != nil {
		return "", fmt.Errorf("%v: set %s up: %w", h, la.Name, err)
	}
	for _, a := range addrs {
		if err := h.addAddr(l, a); err != nil {
			return "", err
		}
	}
	return la.Name, nil
}

// SetLink sets h's interface dev administratively up or down, inside its
// namespace: the director sees its own interface go down (a switch port
// cut is Host.SetPort).
func (h *Host) SetLink(dev string, up bool) error {
	l, err := h.link(dev)
	if err != nil {
		return err
	}
	if up {
		err = h.handle().LinkSetUp(l)
	} else {
		err = h.handle().LinkSetDown(l)
	}
	if err != nil {
		return fmt.Errorf("%v: set %s up=%v: %w", h, dev, up, err)
	}
	return nil
}
