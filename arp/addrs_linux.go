package arp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Kernel manages addresses through rtnetlink in the current network namespace.
type Kernel struct{}

var _ Addresses = Kernel{}

func link(dev string) (netlink.Link, error) {
	l, err := netlink.LinkByName(dev)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("interface %q: %w", dev, ErrNotFound)
		}
		return nil, fmt.Errorf("interface %q: %w", dev, err)
	}
	return l, nil
}

// List implements Addresses.
func (Kernel) List(ctx context.Context, dev string) ([]netip.Prefix, error) {
	return listAddrs(dev, func(netlink.Addr) bool { return true })
}

// listAddrs returns the addresses of dev that keep says to.
func listAddrs(dev string, keep func(netlink.Addr) bool) ([]netip.Prefix, error) {
	l, err := link(dev)
	if err != nil {
		return nil, err
	}
	var addrs []netlink.Addr
	for range 5 { // a dump interrupted by a concurrent change returns partial results
		addrs, err = netlink.AddrList(l, netlink.FAMILY_ALL)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %q: %w", dev, err)
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || !keep(a) {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

func toNetlink(p netip.Prefix) *netlink.Addr {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	// Preferred lifetime 0 ("deprecated"): the address receives and answers
	// as any other, but the kernel never picks it as the source of the
	// host's own packets. Otherwise an IPv6 VIP in the real servers' /64
	// would be the director's preferred source for them (RFC 6724, longest
	// match): its health checks would leave from the VIP and the answers go
	// to the real servers' own VIP on lo, and an IPVS tunnel's outer source
	// would be the VIP, which the real server (holding it too) drops.
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)},
		ValidLft: infiniteLifetime, PreferedLft: 0}
	if p.Addr().Is6() {
		// A VIP must work at once: duplicate address detection would keep it
		// tentative (unusable) for a second or more.
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// Add implements Addresses.
func (Kernel) Add(ctx context.Context, dev string, p netip.Prefix) error {
	l, err := link(dev)
	if err != nil {
		return err
	}
	if err := netlink.AddrReplace(l, toNetlink(p)); err != nil {
		return fmt.Errorf("adding %s to %q: %w", p, dev, err)
	}
	return nil
}

// Delete implements Addresses.
func (Kernel) Delete(ctx context.Context, dev string, p netip.Prefix) error {
	l, err := link(dev)
	if err != nil {
		return err
	}
	if err := netlink.AddrDel(l, toNetlink(p)); err != nil {
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return fmt.Errorf("deleting %s from %q: %w", p, dev, ErrNotFound)
		}
		return fmt.Errorf("deleting %s from %q: %w", p, dev, err)
	}
	return nil
}
