package keepalived

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/lvsd/lvsd/agent/importer"
)

// expandRange reads an address, a range "10.0.0.1-10",
// "10.0.0.250-10.0.1.10" or a prefix "10.0.0.8/29".
func expandRange(s string) ([]netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		p = p.Masked()
		var out []netip.Addr
		for a := p.Addr(); p.Contains(a); a = a.Next() {
			if len(out) == maxGroupAddresses {
				return nil, fmt.Errorf("prefix %s holds more than %d addresses", s, maxGroupAddresses)
			}
			out = append(out, a)
		}
		return out, nil
	}
	from, to, isRange := strings.Cut(s, "-")
	first, err := netip.ParseAddr(from)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IP address, range or prefix", s)
	}
	first = first.Unmap()
	if !isRange {
		return []netip.Addr{first}, nil
	}
	last, err := netip.ParseAddr(to)
	if err != nil {
		// The short form replaces the last part: 10.0.0.1-10, ae00::2-9.
		sep := "."
		if first.Is6() {
			sep = ":"
		}
		head := from[:strings.LastIndex(from, sep)+1]
		if last, err = netip.ParseAddr(head + to); err != nil {
			return nil, fmt.Errorf("%q is not an address range like 10.0.0.1-10", s)
		}
	}
	last = last.Unmap()
	if last.Less(first) || last.Is4() != first.Is4() {
		return nil, fmt.Errorf("range %q ends before it starts", s)
	}
	var out []netip.Addr
	for a := first; ; a = a.Next() {
		if len(out) == maxGroupAddresses {
			return nil, fmt.Errorf("range %q holds more than %d addresses", s, maxGroupAddresses)
		}
		out = append(out, a)
		if a == last {
			return out, nil
		}
	}
}

// forwarding reads lb_kind / lvs_method.
func (c *converter) forwarding(n *Node, set *vsSettings) {
	if len(n.Args) == 0 {
		c.notMapped(n, "%s takes NAT, DR or TUN", n.Keyword)
		return
	}
	switch strings.ToUpper(n.Args[0]) {
	case "NAT":
		set.forwarding = "nat"
		c.mapped(n, "forwarding: nat")
	case "DR":
		set.forwarding = "dr"
		c.mapped(n, "forwarding: dr")
	case "TUN":
		set.forwarding = "tunnel"
		tun, err := tunnelOptions(n.Args[1:])
		if err != nil {
			c.approx(n, "forwarding: tunnel with IPIP: %v", err)
			return
		}
		set.tunnel, set.tunnelAt = tun, n
		c.mapped(n, "forwarding: tunnel %s", tun)
	default:
		c.notMapped(n, "%q is not NAT, DR or TUN", n.Args[0])
	}
}

// tunnelOptions reads `type {ipip|gue port N|gre} [nocsum|csum|remcsum]`
// into a tunnel block ("" for plain IPIP).
func tunnelOptions(args []string) (string, error) {
	if len(args) == 0 {
		return "", nil
	}
	if args[0] != "type" || len(args) < 2 {
		return "", fmt.Errorf("%q is not type ipip, gue or gre", strings.Join(args, " "))
	}
	encap, rest := args[1], args[2:]
	var parts []string
	switch encap {
	case "ipip":
	case "gre":
		parts = append(parts, "encap: gre")
	case "gue":
		if len(rest) < 2 || rest[0] != "port" {
			return "", fmt.Errorf("gue needs port N")
		}
		p, err := strconv.Atoi(rest[1])
		if err != nil || p < 1 || p > 65535 {
			return "", fmt.Errorf("gue port %q is not a port", rest[1])
		}
		parts = append(parts, "encap: gue", "port: "+strconv.Itoa(p))
		rest = rest[2:]
	default:
		return "", fmt.Errorf("tunnel type %q is not ipip, gue or gre", encap)
	}
	for _, r := range rest {
		switch {
		case r == "csum" && encap == "gue":
			parts = append(parts, "checksum: checksum")
		case r == "nocsum":
		default:
			return "", fmt.Errorf("%s is not something lvsd's tunnels do (GRE checksums and remote checksum offload are refused by the real servers)", r)
		}
	}
	if len(parts) == 0 {
		return "", nil
	}
	return "{" + strings.Join(parts, ", ") + "}", nil
}

// maskBits reads persistence_granularity: a netmask or a prefix length.
func maskBits(args []string) (int, bool) {
	if len(args) != 1 {
		return 0, false
	}
	bits, err := importer.PrefixLen(args[0], 128)
	return bits, err == nil
}

func (c *converter) sorryServer(n *Node, set *vsSettings) {
	if len(n.Args) < 1 || len(n.Args) > 2 {
		c.notMapped(n, "sorry_server takes IP [PORT]")
		return
	}
	a, err := netip.ParseAddr(n.Args[0])
	if err != nil {
		c.notMapped(n, "%q is not an IP address", n.Args[0])
		return
	}
	set.sorryAddr = a.Unmap()
	if len(n.Args) == 2 {
		p, ok := argInt(n, 1, 0, 65535)
		if !ok {
			c.notMapped(n, "port %q is not a port", n.Args[1])
			set.sorryAddr = netip.Addr{}
			return
		}
		set.sorryPort = p
	}
	c.mapped(n, "sorry_server; it takes new connections while no backend is eligible (keepalived: while the quorum is lost)")
}

// badVIP says why lvsd cannot take a as a VIP ("" when it can).
func badVIP(a netip.Addr) string {
	if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
		return "is not a unicast address lvsd can hold as a VIP"
	}
	return ""
}

func commonPort(ts []target) int {
	port := 0
	for _, t := range ts {
		if t.allPorts || len(t.ports) != 1 || (port != 0 && t.ports[0] != port) {
			return 0
		}
		port = t.ports[0]
	}
	return port
}
