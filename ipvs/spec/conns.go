package spec

import (
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// Connection is one entry of the kernel's IPVS connection table.
type Connection struct {
	// Protocol is TCP, UDP or SCTP; l4.Any for a persistence template
	// (the kernel's "IP" lines), which is not a connection.
	Protocol l4.Protocol
	Client   netip.AddrPort // the client's address and port
	Virtual  netip.AddrPort // the VIP and port the client connected to
	Dest     netip.AddrPort // the real server IPVS chose
	// State is the kernel's name of the connection's state: for TCP
	// ESTABLISHED, SYN_RECV, FIN_WAIT, TIME_WAIT, CLOSE_WAIT, ...; "UDP"
	// for UDP; SCTP's own names for SCTP.
	State string
	// Expires is how long the entry lives without another packet.
	Expires time.Duration
}
