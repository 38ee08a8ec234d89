package arp

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var _ ExpiringAddresses = Kernel{}

// infiniteLifetime is the kernel's "forever" (INFINITY_LIFE_TIME).
const infiniteLifetime = 0xFFFFFFFF

// AddExpiring implements ExpiringAddresses. Replacing an existing address
// restarts its lifetime: that is the renewal.
func (Kernel) AddExpiring(ctx context.Context, dev string, p netip.Prefix, lifetime time.Duration) error {
	l, err := link(dev)
	if err != nil {
		return err
	}
	a := toNetlink(p)
	a.ValidLft = lifetimeSeconds(lifetime)
	if p.Addr().Is4() {
		a.PreferedLft = a.ValidLft
	} // IPv6 stays deprecated (toNetlink)
	if err := netlink.AddrReplace(l, a); err != nil {
		return fmt.Errorf("adding %s to %q for %ds: %w", p, dev, a.ValidLft, err)
	}
	return nil
}

// ListExpiring implements ExpiringAddresses.
func (Kernel) ListExpiring(ctx context.Context, dev string) ([]netip.Prefix, error) {
	return listAddrs(dev, func(a netlink.Addr) bool {
		return a.Flags&unix.IFA_F_PERMANENT == 0 && uint32(a.ValidLft) != infiniteLifetime
	})
}
