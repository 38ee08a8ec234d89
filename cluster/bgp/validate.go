package bgp

import (
	"errors"
	"fmt"
	"net/netip"
)

// maxPrepend bounds AS-path prepending: beyond a few the path is already
// the longest everywhere.
const maxPrepend = 10

// validateRoutes checks a route set against the configuration: canonical
// prefixes, each once, next hops of the prefix's family, a session that
// carries the family, prepending only towards eBGP peers. It returns the
// routes keyed by prefix.
func validateRoutes(cfg Config, routes []Route) (map[netip.Prefix]Route, error) {
	out := make(map[netip.Prefix]Route, len(routes))
	var errs []error
	for _, r := range routes {
		p := r.Prefix
		switch {
		case !p.IsValid():
			errs = append(errs, fmt.Errorf("route %v: invalid prefix", p))
			continue
		case p.Addr().Is4In6():
			errs = append(errs, fmt.Errorf("route %s: IPv4-mapped prefix; write the IPv4 prefix", p))
			continue
		case p != p.Masked():
			errs = append(errs, fmt.Errorf("route %s: host bits set (did you mean %s?)", p, p.Masked()))
			continue
		}
		if _, dup := out[p]; dup {
			errs = append(errs, fmt.Errorf("route %s: listed twice", p))
			continue
		}
		f := familyOf(p.Addr())
		if r.NextHop.IsValid() && familyOf(r.NextHop.Unmap()) != f {
			errs = append(errs, fmt.Errorf("route %s: next hop %s is of the other family", p, r.NextHop))
		}
		if r.ASPathPrepend < 0 || r.ASPathPrepend > maxPrepend {
			errs = append(errs, fmt.Errorf("route %s: as-path prepend %d outside 0-%d", p, r.ASPathPrepend, maxPrepend))
		}
		carried := false
		for _, peer := range cfg.Peers {
			carried = carried || peer.carries(f)
			if r.ASPathPrepend > 0 && !peer.external(cfg.ASN) && peer.carries(f) {
				errs = append(errs, fmt.Errorf("route %s: as-path prepend towards iBGP peer %s (same ASN): routers drop paths with their own ASN; use local-pref or MED",
					p, peer.Address))
			}
		}
		if !carried {
			errs = append(errs, fmt.Errorf("route %s: no peer carries %s", p, f))
		}
		r.NextHop = r.NextHop.Unmap()
		out[p] = r
	}
	return out, errors.Join(errs...)
}
