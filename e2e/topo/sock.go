package topo

import (
	"context"
	"net"
	"net/netip"
	"strings"
)

// Listen creates a listener inside the host's namespace (see net.Listen).
// ":80" with network "tcp" is dual stack, so it also accepts IPv4.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := h.Do(func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenPacket creates a packet socket inside the host's namespace (see
// net.ListenPacket).
func (h *Host) ListenPacket(network, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := h.Do(func() (err error) {
		c, err = net.ListenPacket(network, addr)
		return err
	})
	return c, err
}

// Dial connects from inside the host's namespace to dst, from source
// address src (any port) unless src is the zero Addr. network is "tcp",
// "tcp4", "tcp6", "udp", "udp4" or "udp6". Each Dial in flight holds one OS
// thread while it connects; the connection itself is an ordinary net.Conn
// usable from any goroutine.
func (h *Host) Dial(ctx context.Context, network string, src netip.Addr, dst netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	if src.IsValid() {
		if strings.HasPrefix(network, "udp") {
			d.LocalAddr = &net.UDPAddr{IP: src.AsSlice()}
		} else {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
	}
	var c net.Conn
	// A single literal address: the dialer connects on this goroutine (no
	// happy-eyeballs helpers), so the socket is made on the switched thread.
	err := h.Do(func() (err error) {
		c, err = d.DialContext(ctx, network, dst.String())
		return err
	})
	return c, err
}
