package connsync

import (
	"net"
	"net/netip"
)

// datagramReader receives the local master daemon's datagrams. Read blocks
// until one arrives; Close makes a blocked Read return an error.
type datagramReader interface {
	Read(b []byte) (int, error)
	Close() error
}

// datagramWriter sends one datagram to the local backup daemon.
type datagramWriter interface {
	Write(b []byte) error
	Close() error
}

// openFunc opens both sockets in the calling thread's network namespace.
type openFunc func(cfg Config) (datagramReader, datagramWriter, error)

// pushDatagram sends one byte to the pusher service from a new socket, so
// from a new port: a new IPVS connection, so a new sync record.
func pushDatagram(to netip.AddrPort) error {
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte{0})
	return err
}
