package arp

import (
	"context"
	"fmt"
)

// Tunnels manages the receiving end of IPVS tunnels on a real server: the
// devices that unwrap IPIP, IPv6-in-IPv6 and GRE, and the UDP ports that
// unwrap GUE (foo-over-udp). Implementations must be safe for concurrent
// use.
type Tunnels interface {
	// Link returns the state of dev; a missing device fails with ErrNotFound.
	Link(ctx context.Context, dev string) (Link, error)
	// CreateLink makes dev of kind exist. The kernel loads the kind's
	// module on demand, and the module makes its fallback device (tunl0,
	// ip6tnl0, gre0, ip6gre0) in every namespace: when dev is that device,
	// CreateLink finds it there and reports created false. Either way it
	// stays down.
	CreateLink(ctx context.Context, dev, kind string) (created bool, err error)
	// SetUp brings dev up or down.
	SetUp(ctx context.Context, dev string, up bool) error
	// DeleteLink removes a device CreateLink created.
	DeleteLink(ctx context.Context, dev string) error
	// FouPorts lists the foo-over-udp receive ports of both families.
	FouPorts(ctx context.Context) ([]FouPort, error)
	// AddFouPort opens a GUE receive port; one that exists fails with an
	// error wrapping ErrExists.
	AddFouPort(ctx context.Context, p FouPort) error
	// DeleteFouPort closes a GUE receive port; a missing one fails with an
	// error wrapping ErrNotFound.
	DeleteFouPort(ctx context.Context, p FouPort) error
}

// Link is what a real server needs to know of a device.
type Link struct {
	Name string
	Kind string // rtnetlink's kind: "ipip", "ip6tnl", "gre", "ip6gre", "veth", …
	Up   bool
}

// FouPort is a UDP port on which the kernel unwraps GUE (`ip fou add port
// N gue`, with -6 for IPv6): the inner packet goes on to the tunnel
// device of its protocol (tunl0 for IPv4, ip6tnl0 for IPv6).
type FouPort struct {
	Port uint16
	IPv6 bool
}

func (p FouPort) String() string {
	if p.IPv6 {
		return fmt.Sprintf("gue port %d ipv6", p.Port)
	}
	return fmt.Sprintf("gue port %d", p.Port)
}

// Tunnel device kinds, as rtnetlink names them.
const (
	KindIPIP   = "ipip"   // IPv4-in-IPv4; fallback device tunl0 (module ipip)
	KindIP6IP6 = "ip6tnl" // IPv6-in-IPv6; fallback device ip6tnl0 (module ip6_tunnel)
	KindGRE    = "gre"    // GRE over IPv4; fallback device gre0 (module ip_gre)
	KindGRE6   = "ip6gre" // GRE over IPv6; fallback device ip6gre0 (module ip6_gre)
)

// FallbackDevice is the device a kind's module creates in every namespace,
// which receives every packet of that encapsulation no other tunnel claims.
var FallbackDevice = map[string]string{KindIPIP: "tunl0", KindIP6IP6: "ip6tnl0", KindGRE: "gre0", KindGRE6: "ip6gre0"}
