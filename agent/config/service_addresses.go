// The addresses a service file names: who may connect (source_ranges), the
// FULLNAT source addresses, the NAT gateway and the interfaces they go on.

package config

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

func (d *doc) sourceRanges(s Service, raw []string) []netip.Prefix {
	var out []netip.Prefix
	for i, r := range raw {
		path := fmt.Sprintf("$.source_ranges[%d]", i)
		p, err := netip.ParsePrefix(r)
		switch {
		case err != nil:
			d.Errorf(path, "service %q: source range %q is not a CIDR prefix like 192.0.2.0/24", s.Name, r)
			continue
		case p.Masked() != p:
			d.Errorf(path, "service %q: source range %s has host bits set (did you mean %s?)", s.Name, p, p.Masked())
			continue
		case p.Bits() == 0:
			d.Errorf(path, "service %q: source range %s matches every client; leave source_ranges out instead", s.Name, p)
			continue
		case s.VIP.IsValid() && p.Addr().Is4() != s.VIP.Is4():
			d.Errorf(path, "service %q: source range %s and vip %s are of different IP families", s.Name, p, s.VIP)
			continue
		case slices.Contains(out, p):
			d.Errorf(path, "service %q: source range %s is listed twice", s.Name, p)
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return out
}

func (d *doc) snatAddresses(s Service, raw []string, perDirector map[string][]string) ([]netip.Addr, map[string][]netip.Addr) {
	if s.Forwarding != FullNAT {
		switch {
		case len(raw) > 0:
			d.Errorf("$.fullnat", "service %q: fullnat.source_addresses needs forwarding: fullnat", s.Name)
		case len(perDirector) > 0:
			d.Errorf("$.fullnat", "service %q: fullnat.per_director needs forwarding: fullnat", s.Name)
		}
		return nil, nil
	}
	switch {
	case len(raw) > 0 && len(perDirector) > 0:
		d.Errorf("$.fullnat", "service %q: give fullnat.source_addresses (one director or active-standby) or fullnat.per_director (cluster mode ecmp), not both", s.Name)
		return nil, nil
	case len(perDirector) > 0:
		return nil, d.snatByDirector(s, perDirector)
	case len(raw) == 0:
		d.Errorf("$", "service %q: forwarding fullnat needs fullnat.source_addresses (the director's SNAT addresses)", s.Name)
		return nil, nil
	}
	return d.snatRange(s, "$.fullnat.source_addresses", raw), nil
}

// snatByDirector parses fullnat.per_director: each director's own range,
// no address in two.
func (d *doc) snatByDirector(s Service, raw map[string][]string) map[string][]netip.Addr {
	out := make(map[string][]netip.Addr, len(raw))
	owner := map[netip.Addr]string{}
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		path := "$.fullnat.per_director." + name
		if name == "" || len(raw[name]) == 0 {
			d.Errorf(path, "service %q: fullnat.per_director needs a node name and at least one address for it", s.Name)
			continue
		}
		addrs := d.snatRange(s, path, raw[name])
		for _, a := range addrs {
			if other, ok := owner[a]; ok {
				d.Errorf(path, "service %q: SNAT address %s is given to directors %q and %q; each needs its own", s.Name, a, other, name)
				break
			}
			owner[a] = name
		}
		out[name] = addrs
	}
	return out
}

// snatRange parses the SNAT addresses at path: of the VIP's family and
// consecutive, sorted.
func (d *doc) snatRange(s Service, path string, raw []string) []netip.Addr {
	var out []netip.Addr
	for i, r := range raw {
		at := fmt.Sprintf("%s[%d]", path, i)
		a, err := netip.ParseAddr(r)
		switch {
		case err != nil:
			d.Errorf(at, "service %q: SNAT address %q is not an IP address", s.Name, r)
			continue
		case s.VIP.IsValid() && a.Unmap().Is4() != s.VIP.Is4():
			d.Errorf(at, "service %q: SNAT address %s and vip %s are of different IP families", s.Name, a, s.VIP)
			continue
		}
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	for i := 1; i < len(out); i++ {
		if out[i] != out[i-1].Next() {
			d.Errorf(path, "service %q: SNAT addresses must be consecutive (one nftables range); %s does not follow %s", s.Name, out[i], out[i-1])
			break
		}
	}
	return out
}

// gateway parses nat.gateway: the address the real servers of a NAT
// service route through, held by the director that holds the VIP.
func (d *doc) gateway(s Service, raw string) netip.Addr {
	if raw == "" {
		return netip.Addr{}
	}
	if s.Forwarding != NAT {
		d.Errorf("$.nat.gateway", "service %q: nat.gateway needs forwarding: nat (FULLNAT real servers reply to the source addresses)", s.Name)
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(raw)
	switch {
	case err != nil || a.Zone() != "":
		d.Errorf("$.nat.gateway", "service %q: nat.gateway %q is not an IP address", s.Name, raw)
	case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
		d.Errorf("$.nat.gateway", "service %q: nat.gateway %s must be a unicast address", s.Name, raw)
	case s.VIP.IsValid() && a.Unmap().Is4() != s.VIP.Is4():
		d.Errorf("$.nat.gateway", "service %q: nat.gateway %s and vip %s are of different IP families", s.Name, a, s.VIP)
	case a.Unmap() == s.VIP:
		d.Errorf("$.nat.gateway", "service %q: nat.gateway must not be the vip", s.Name)
	default:
		return a.Unmap()
	}
	return netip.Addr{}
}

// interfaceName validates an optional interface key at path: "" is unset.
func (d *doc) interfaceName(path, service, key, raw string) string {
	if raw != "" && !isInterfaceName(raw) {
		d.Errorf(path, "service %q: %s %q is not an interface name (1-15 characters, no spaces, slashes or colons)", service, key, raw)
		return ""
	}
	return raw
}

// Addresses are the addresses the director holding the VIP puts on its
// interfaces: the VIP, the FULLNAT source addresses real servers reply to
// and the NAT gateway they route through. They move together.
func (s Service) Addresses() []netip.Addr {
	out := append([]netip.Addr{s.VIP}, s.SNATAddresses...)
	if s.Gateway.IsValid() {
		out = append(out, s.Gateway)
	}
	return out
}
