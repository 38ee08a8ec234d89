package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// Spec is every nftables rule lvsd wants, in lvsd's vocabulary. The order of
// the rules does not matter: Render sorts them.
type Spec struct {
	Marks []MarkRule
	SNAT  []SNATRule
	// SyncPorts are the UDP ports of the kernel's IPVS sync daemons on lo,
	// in the multicast group SyncGroup, fed by lvsd's relay only: packets to
	// them from sockets of users other than root are dropped (an "output"
	// chain). Empty: no connection sync.
	SyncPorts []uint16
	SyncGroup netip.Addr
	// DropRedirects6 drops the ICMPv6 redirects the director would send
	// while it forwards IPv6 (NAT, FULLNAT): IPv6 has no send_redirects
	// sysctl, and a redirect tells a one-armed NAT real server to answer
	// the client directly, around the reverse NAT.
	DropRedirects6 bool
	// ClampMSS lowers the MSS that this host's TCP answers from a VIP
	// announce (in the SYN-ACK, an "output" chain): a real server behind
	// an IPVS tunnel, whose clients' segments must fit in the tunnel.
	ClampMSS []MSSClamp
	// GuardSNAT are source addresses besides the SNAT rules' that take
	// only replies: under ECMP, the other directors' own, which this one
	// holds when it takes them over.
	GuardSNAT []netip.Addr
	// ClusterPort filters the cluster port; nil: no filter (no cluster).
	ClusterPort *ClusterPort
}

// MSSClamp caps the MSS option of SYN-ACKs sent from VIP at MSS.
type MSSClamp struct {
	VIP netip.Addr
	MSS uint16
}

// Bounds of a clamped MSS: IPv4's minimum MSS and the largest one a
// 65535-byte MTU allows.
const (
	minMSS = 536
	maxMSS = 65495
)

func (c MSSClamp) check() (Family, error) {
	switch {
	case !c.VIP.IsValid() || c.VIP.IsUnspecified() || c.VIP.IsMulticast():
		return 0, fmt.Errorf("VIP %v: not a unicast address", c.VIP)
	case c.MSS < minMSS || c.MSS > maxMSS:
		return 0, fmt.Errorf("MSS %d is not in %d-%d", c.MSS, minMSS, maxMSS)
	}
	if err := checkAddr(c.VIP); err != nil {
		return 0, fmt.Errorf("VIP %s: %w", c.VIP, err)
	}
	return familyOf(c.VIP), nil
}

// Match selects packets addressed to one VIP.
type Match struct {
	VIP netip.Addr
	// Protocol is the IP protocol; l4.Any matches all of them.
	Protocol l4.Protocol
	// Ports are the destination ports; empty means all ports. Listing ports
	// requires TCP, UDP or SCTP. Overlapping and adjacent ranges are merged.
	Ports []l4.PortRange
	// Sources restricts the rule to clients inside these prefixes (source-
	// range steering); empty means every client. The longest matching prefix
	// among all rules for the same packet wins.
	Sources []netip.Prefix
}

// MarkRule sets the packet mark of matching packets, so that the IPVS
// fwmark service with that mark takes them.
type MarkRule struct {
	Match
	Mark uint32 // must not be 0: IPVS has no fwmark service 0
	// Comment is shown on the rule in nft listings (e.g. the service name).
	Comment string
}

// SNATRule source-NATs the connections of a FULLNAT service: matching
// connections are marked with CtMark in prerouting, and in postrouting the
// marked connections get a source address from To.
type SNATRule struct {
	Match
	CtMark uint32 // must not be 0: every connection starts with ct mark 0
	// To are the SNAT source addresses. nftables takes one address range per
	// snat statement, so they must be consecutive (e.g. .2, .3, .4); the
	// kernel picks one per client by hashing the client's address ("snat
	// to ... persistent", nf_nat_core), the same on every director and for
	// every connection of the client. Rules sharing a CtMark must have the
	// same To.
	To []netip.Addr
	// Comment is shown on the rules in nft listings (e.g. the service name).
	Comment string
}

// maxComment is libnftnl's limit for rule comments (NFTNL_UDATA_COMMENT_MAXLEN).
const maxComment = 128

// check validates what one Match says on its own and returns its family.
func (m Match) check() (Family, error) {
	if !m.VIP.IsValid() {
		return 0, errors.New("no VIP")
	}
	if err := checkAddr(m.VIP); err != nil {
		return 0, fmt.Errorf("VIP %s: %w", m.VIP, err)
	}
	if m.VIP.IsUnspecified() || m.VIP.IsMulticast() {
		return 0, fmt.Errorf("VIP %s: not a unicast address", m.VIP)
	}
	fam := familyOf(m.VIP)
	switch m.Protocol {
	case l4.Any, l4.TCP, l4.UDP, l4.SCTP:
	default:
		return 0, fmt.Errorf("protocol %d: want tcp, udp, sctp or any", uint8(m.Protocol))
	}
	if len(m.Ports) > 0 && m.Protocol == l4.Any {
		// Ports only exist in tcp/udp/sctp; seed 001's L3_DEFAULT rules always
		// take all ports. One rule per protocol expresses "tcp and udp on 53".
		return 0, errors.New("ports need protocol tcp, udp or sctp (protocol any takes all ports)")
	}
	for _, r := range m.Ports {
		if r.From == 0 || r.From > r.To {
			return 0, fmt.Errorf("port range %d-%d: want 1 <= from <= to", r.From, r.To)
		}
	}
	for _, p := range m.Sources {
		if !p.IsValid() {
			return 0, errors.New("invalid source prefix")
		}
		if err := checkAddr(p.Addr()); err != nil {
			return 0, fmt.Errorf("source %s: %w", p, err)
		}
		if familyOf(p.Addr()) != fam {
			return 0, fmt.Errorf("source %s: not the VIP's address family", p)
		}
		if p.Bits() == 0 {
			return 0, fmt.Errorf("source %s matches every client: leave sources empty instead", p)
		}
		if p.Masked() != p {
			return 0, fmt.Errorf("source %s has host bits set (did you mean %s?)", p, p.Masked())
		}
	}
	return fam, nil
}

func checkAddr(a netip.Addr) error {
	switch {
	case a.Zone() != "":
		return errors.New("zoned addresses are not supported")
	case a.Is4In6():
		return fmt.Errorf("IPv4-mapped IPv6 address: write %s", a.Unmap())
	}
	return nil
}

func checkComment(c string) error {
	if len(c) > maxComment {
		return fmt.Errorf("comment longer than %d bytes", maxComment)
	}
	for _, r := range c {
		// nft prints comments between double quotes without escaping.
		if r == '"' || r == '\\' || r < ' ' || r == 0x7f {
			return fmt.Errorf("comment %q: no quotes, backslashes or control characters", c)
		}
	}
	return nil
}

func (r MarkRule) check() (Family, error) {
	fam, err := r.Match.check()
	if err != nil {
		return 0, err
	}
	if r.Mark == 0 {
		return 0, errors.New("mark 0 (IPVS fwmark services need a non-zero mark)")
	}
	return fam, checkComment(r.Comment)
}

func (r SNATRule) check() (Family, AddrRange, error) {
	fam, err := r.Match.check()
	if err != nil {
		return 0, AddrRange{}, err
	}
	if r.CtMark == 0 {
		return 0, AddrRange{}, errors.New("ct mark 0 (every connection starts with ct mark 0)")
	}
	if err := checkComment(r.Comment); err != nil {
		return 0, AddrRange{}, err
	}
	if len(r.To) == 0 {
		return 0, AddrRange{}, errors.New("no SNAT source addresses")
	}
	for _, a := range r.To {
		if err := checkAddr(a); err != nil {
			return 0, AddrRange{}, fmt.Errorf("SNAT address %s: %w", a, err)
		}
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
			return 0, AddrRange{}, fmt.Errorf("SNAT address %s: not a unicast address", a)
		}
		if familyOf(a) != fam {
			return 0, AddrRange{}, fmt.Errorf("SNAT address %s: not the VIP's address family", a)
		}
	}
	to, ok := consecutive(r.To)
	if !ok {
		return 0, AddrRange{}, fmt.Errorf("SNAT addresses %s are not consecutive: nftables snat takes one address range", joinAddrs(r.To))
	}
	return fam, to, nil
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// describe names a rule in errors: its comment if it has one, else its match.
func describe(kind string, i int, comment string, m Match) string {
	if comment != "" {
		return fmt.Sprintf("%s rule %d (%s)", kind, i, comment)
	}
	return fmt.Sprintf("%s rule %d (%s %s)", kind, i, m.Protocol, m.VIP)
}
