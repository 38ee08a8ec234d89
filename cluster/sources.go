package cluster

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"time"
)

// DefaultSources are the sources the cluster port admits when the agent
// file does not say (cluster.allow_from): every peer's address (host names
// resolved now) and the on-link prefix of the address the cluster binds
// to, so that a director joining from the same subnet without being in
// everyone's peers (an ECMP group growing) still gets in. With bind's host
// empty (bind unset: the director's own address on iface), every on-link
// prefix of iface counts. What cannot be found (a peer's name that does not
// resolve) is left out: the next reload of the agent file looks again.
func DefaultSources(ctx context.Context, bind, iface string, peers []string) []netip.Prefix {
	out := []netip.Prefix{}
	add := func(p netip.Prefix) {
		if p.IsValid() && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range peers {
		host, _, err := net.SplitHostPort(p)
		if err != nil {
			continue
		}
		for _, a := range lookup(ctx, host) {
			add(netip.PrefixFrom(a, a.BitLen()))
		}
	}
	host, _, _ := net.SplitHostPort(bind)
	want, _ := netip.ParseAddr(host)
	for _, p := range onLink(iface, want.Unmap()) {
		add(p)
	}
	return out
}

// lookup is host's addresses: itself if it is one, else what DNS says
// within 2 s.
func lookup(ctx context.Context, host string) []netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips
}

// onLink are the subnets of the host's addresses: of the one equal to bind
// (on any interface), or with bind invalid of every global address of
// iface.
func onLink(iface string, bind netip.Addr) []netip.Prefix {
	ifis, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, ifi := range ifis {
		if !bind.IsValid() && ifi.Name != iface {
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, _ := netip.AddrFromSlice(n.IP)
			ip = ip.Unmap()
			ones, _ := n.Mask.Size()
			switch {
			case bind.IsValid() && ip != bind:
			case !bind.IsValid() && !ip.IsGlobalUnicast():
			default:
				out = append(out, netip.PrefixFrom(ip, ones).Masked())
			}
		}
	}
	if bind.IsValid() && out == nil {
		out = append(out, netip.PrefixFrom(bind, bind.BitLen()))
	}
	return out
}
