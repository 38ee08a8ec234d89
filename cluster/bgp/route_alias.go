package bgp

import "github.com/lvsd/lvsd/cluster/bgp/route"

// The speaker's route values live in cluster/bgp/route, which links no
// GoBGP, so the configuration and the agent's planning can build them;
// these names keep the speaker's API whole.
type (
	Route          = route.Route
	Community      = route.Community
	LargeCommunity = route.LargeCommunity
	Family         = route.Family
)

// Families of PeerConfig.Families.
const (
	IPv4Unicast = route.IPv4Unicast
	IPv6Unicast = route.IPv6Unicast
)

// ParseCommunity parses "65000:100" or a well-known name (no-export,
// no-advertise, no-export-subconfed).
func ParseCommunity(s string) (Community, error) { return route.ParseCommunity(s) }

// ParseLargeCommunity parses "65000:1:2".
func ParseLargeCommunity(s string) (LargeCommunity, error) { return route.ParseLargeCommunity(s) }
