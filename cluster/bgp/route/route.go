// Package route holds the values a BGP speaker announces — a Route with its
// communities, large communities and path attributes, and the address
// families a session carries — apart from the speaker, so that the
// configuration and the agent's planning build routes without linking
// GoBGP. cluster/bgp announces them; its names for these types are aliases.
package route

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Family is an address family a session carries (AFI/SAFI unicast).
type Family string

// The address families a session may carry.
const (
	IPv4Unicast Family = "ipv4-unicast"
	IPv6Unicast Family = "ipv6-unicast"
)

// Route is one prefix the speaker announces, with its attributes.
type Route struct {
	Prefix netip.Prefix // a VIP as /32 or /128, or any prefix
	// NextHop: zero is the session's own address (or the speaker's
	// NextHop4/6, bgp.Config).
	NextHop          netip.Addr
	Communities      []Community
	LargeCommunities []LargeCommunity
	// LocalPref is sent when nonzero; routers honour it from iBGP peers
	// only (RFC 4271 §5.1.5).
	LocalPref uint32
	// MED is sent when set (lower is preferred among a router's paths
	// from one neighbouring AS).
	MED *uint32
	// ASPathPrepend adds the local ASN that many more times (0–10): a
	// longer AS path makes routers prefer the other directors. eBGP only.
	ASPathPrepend int
}

// Community is a standard community (RFC 1997), written ASN:VALUE.
type Community uint32

// ParseCommunity parses "65000:100" or a well-known name (no-export,
// no-advertise, no-export-subconfed).
func ParseCommunity(s string) (Community, error) {
	switch strings.ToLower(s) {
	case "no-export":
		return 0xFFFFFF01, nil
	case "no-advertise":
		return 0xFFFFFF02, nil
	case "no-export-subconfed":
		return 0xFFFFFF03, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseUint(hi, 10, 16)
	b, err2 := strconv.ParseUint(lo, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("community %q: want ASN:VALUE, each 0-65535", s)
	}
	return Community(a<<16 | b), nil
}

func (c Community) String() string { return fmt.Sprintf("%d:%d", c>>16, c&0xffff) }

// LargeCommunity is a large community (RFC 8092), written ASN:X:Y.
type LargeCommunity struct{ ASN, Local1, Local2 uint32 }

// ParseLargeCommunity parses "65000:1:2".
func ParseLargeCommunity(s string) (LargeCommunity, error) {
	parts := strings.Split(s, ":")
	var v [3]uint64
	if len(parts) != 3 {
		return LargeCommunity{}, fmt.Errorf("large community %q: want ASN:X:Y", s)
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return LargeCommunity{}, fmt.Errorf("large community %q: %q is not a 32-bit number", s, p)
		}
		v[i] = n
	}
	return LargeCommunity{uint32(v[0]), uint32(v[1]), uint32(v[2])}, nil
}

func (c LargeCommunity) String() string { return fmt.Sprintf("%d:%d:%d", c.ASN, c.Local1, c.Local2) }

// Equal reports whether two routes announce the same thing.
func (r Route) Equal(o Route) bool {
	medEqual := (r.MED == nil) == (o.MED == nil) && (r.MED == nil || *r.MED == *o.MED)
	return r.Prefix == o.Prefix && r.NextHop == o.NextHop && r.LocalPref == o.LocalPref && medEqual &&
		r.ASPathPrepend == o.ASPathPrepend && slices.Equal(r.Communities, o.Communities) &&
		slices.Equal(r.LargeCommunities, o.LargeCommunities)
}

func (r Route) String() string {
	var b strings.Builder
	b.WriteString(r.Prefix.String())
	if r.NextHop.IsValid() {
		fmt.Fprintf(&b, " next-hop %s", r.NextHop)
	}
	for _, c := range r.Communities {
		fmt.Fprintf(&b, " community %s", c)
	}
	for _, c := range r.LargeCommunities {
		fmt.Fprintf(&b, " large-community %s", c)
	}
	if r.LocalPref != 0 {
		fmt.Fprintf(&b, " local-pref %d", r.LocalPref)
	}
	if r.MED != nil {
		fmt.Fprintf(&b, " med %d", *r.MED)
	}
	if r.ASPathPrepend > 0 {
		fmt.Fprintf(&b, " prepend %d", r.ASPathPrepend)
	}
	return b.String()
}
