// Package l4 names what lvsd's services, IPVS's tables and lvsd's nftables
// rules say alike about the transport layer: the protocol, by the IP
// protocol number the kernel uses in all of them (IPVS services and
// connections, nft's meta l4proto, conntrack tuples), and ranges of ports.
// It lives with IPVS, whose tables balance on these values, and imports
// nothing, so the value packages of IPVS (ipvs/spec), of NAT (nat/rules) and
// of the configuration share one definition without importing one another.
package l4

import "fmt"

// Protocol is an IP protocol number (IPPROTO_*).
type Protocol uint8

// The protocols lvsd balances, and Any.
const (
	// Any is no protocol in particular: a rule that matches every
	// protocol, an IPVS firewall-mark service (which takes whatever the
	// mark selects) or an IPVS persistence template.
	Any  Protocol = 0
	TCP  Protocol = 6  // IPPROTO_TCP
	UDP  Protocol = 17 // IPPROTO_UDP
	SCTP Protocol = 132
)

// String returns the name nft uses ("any" for Any).
func (p Protocol) String() string {
	switch p {
	case Any:
		return "any"
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// PortRange is an inclusive range of ports; From == To is one port.
type PortRange struct{ From, To uint16 }

// String returns "80" or "8000-8099".
func (r PortRange) String() string {
	if r.From == r.To {
		return fmt.Sprint(r.From)
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}
