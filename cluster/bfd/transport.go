package bfd

import (
	"net/netip"
	"time"
)

// RFC 5881: single-hop control packets go to UDP port 3784 with TTL (hop
// limit) 255 (§5), which the receiver checks (GTSM, RFC 5082): no router on
// the way can forge one.
const (
	ControlPort = 3784
	gtsmTTL     = 255
)

// Transport carries control packets: the Server's only contact with the
// network. The UDP implementation follows RFC 5881; tests use an
// in-memory one.
type Transport interface {
	// Open returns the sending side of one session: packets to peer
	// port 3784 from local (zero: any) and a source port of its own in
	// 49152–65535, with TTL (hop limit) 255.
	Open(local, peer netip.Addr, ifname string) (Conn, error)
	// Packets delivers received datagrams.
	Packets() <-chan Datagram
	// Close releases the transport; the Server calls it when it stops.
	Close() error
}

// Conn sends the packets of one session.
type Conn interface {
	Send(b []byte) error
	Close() error
}

// Datagram is one received control packet.
type Datagram struct {
	Data     []byte
	Src, Dst netip.Addr
	TTL      int // TTL or hop limit as received; the Server drops all but 255
	At       time.Time
}
