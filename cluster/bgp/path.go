package bgp

import (
	"net/netip"
	"slices"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// apiPath turns a route into GoBGP's path: NLRI plus ORIGIN IGP, the next
// hop (NEXT_HOP for IPv4, MP_REACH_NLRI for IPv6), and the optional
// attributes. An unspecified next hop makes GoBGP use each session's local
// address.
func apiPath(cfg Config, r Route) (*api.Path, error) {
	addr, bits := r.Prefix.Addr(), uint8(r.Prefix.Bits())
	nh := r.NextHop
	if !nh.IsValid() {
		nh = cfg.nextHopFor(familyOf(addr))
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	var nlri bgp.AddrPrefixInterface
	if addr.Is4() {
		nlri = bgp.NewIPAddrPrefix(bits, addr.String())
		attrs = append(attrs, bgp.NewPathAttributeNextHop(orUnspecified(nh, netip.IPv4Unspecified())))
	} else {
		nlri = bgp.NewIPv6AddrPrefix(bits, addr.String())
		attrs = append(attrs, bgp.NewPathAttributeMpReachNLRI(orUnspecified(nh, netip.IPv6Unspecified()),
			[]bgp.AddrPrefixInterface{nlri}))
	}
	if r.ASPathPrepend > 0 {
		// eBGP export prepends the ASN once more.
		seq := slices.Repeat([]uint32{cfg.ASN}, r.ASPathPrepend)
		attrs = append(attrs, bgp.NewPathAttributeAsPath([]bgp.AsPathParamInterface{
			bgp.NewAs4PathParam(bgp.BGP_ASPATH_ATTR_TYPE_SEQ, seq)}))
	}
	if r.MED != nil {
		attrs = append(attrs, bgp.NewPathAttributeMultiExitDisc(*r.MED))
	}
	if r.LocalPref != 0 {
		attrs = append(attrs, bgp.NewPathAttributeLocalPref(r.LocalPref))
	}
	if len(r.Communities) > 0 {
		cs := make([]uint32, len(r.Communities))
		for i, c := range r.Communities {
			cs[i] = uint32(c)
		}
		attrs = append(attrs, bgp.NewPathAttributeCommunities(cs))
	}
	if len(r.LargeCommunities) > 0 {
		ls := make([]*bgp.LargeCommunity, len(r.LargeCommunities))
		for i, c := range r.LargeCommunities {
			ls[i] = bgp.NewLargeCommunity(c.ASN, c.Local1, c.Local2)
		}
		attrs = append(attrs, bgp.NewPathAttributeLargeCommunities(ls))
	}
	return apiutil.NewPath(nlri, false, attrs, time.Now())
}

func orUnspecified(a, unspecified netip.Addr) string {
	if a.IsValid() {
		return a.String()
	}
	return unspecified.String()
}

func apiFamily(f Family) *api.Family {
	if f == IPv4Unicast {
		return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
}
