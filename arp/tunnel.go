package arp

import (
	"context"

	"github.com/lvsd/lvsd/arp/spec"
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
type Link = spec.Link

// FouPort is a UDP port on which the kernel unwraps GUE.
type FouPort = spec.FouPort

// Tunnel device kinds, as rtnetlink names them (spec.KindIPIP…).
const (
	KindIPIP   = spec.KindIPIP
	KindIP6IP6 = spec.KindIP6IP6
	KindGRE    = spec.KindGRE
	KindGRE6   = spec.KindGRE6
)

// FallbackDevice is the device a kind's module creates in every namespace
// (spec.FallbackDevice).
var FallbackDevice = spec.FallbackDevice
