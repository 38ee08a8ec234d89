// Package records names what a relayed connection record may be applied
// to: a Service is a virtual service configured on this director as the
// records of its connections name it. The agent computes them from its
// desired state without linking the relay's sockets (cluster/connsync),
// which applies a record only for a listed service and real server
// (connsync.Relay.SetServices).
package records

import (
	"net/netip"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// Service is a virtual service configured on this director, as the records
// of its connections name it: by protocol, VIP and port, or by firewall
// mark (with the VIP the mark stands for).
type Service struct {
	VIP      netip.Addr
	Protocol l4.Protocol // l4.Any with FWMark
	Port     uint16      // 0 with FWMark
	FWMark   uint32      // non-zero: a firewall-mark service
	// Dests are its real servers. Port 0 keeps the client's destination
	// port (a firewall-mark service in DR).
	Dests []netip.AddrPort
}
