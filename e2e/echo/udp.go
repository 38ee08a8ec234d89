package echo

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpPort answers every datagram from the address it was sent to. The
// socket is bound to the wildcard address, so without help the kernel would
// pick the reply's source by route (the real server's own address), and a
// client's connected socket would drop a reply to a VIP request. Hence the
// destination is read with IPV6_RECVPKTINFO and used as the reply source
// with IPV6_PKTINFO (the kernel accepts v4-mapped addresses there for IPv4
// peers of a dual-stack socket).
type udpPort struct {
	conn *net.UDPConn
	wg   sync.WaitGroup
}

func (s *Server) startUDP(port uint16) (*udpPort, error) {
	pc, err := s.host.ListenPacket("udp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, err
	}
	conn := pc.(*net.UDPConn)
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	}); err != nil || serr != nil {
		conn.Close()
		return nil, fmt.Errorf("IPV6_RECVPKTINFO: %v %v", err, serr)
	}
	p := &udpPort{conn: conn}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		s.serveUDP(conn, port)
	}()
	return p, nil
}

func (s *Server) serveUDP(conn *net.UDPConn, port uint16) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, 256)
	for {
		_, oobn, _, peer, err := conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			return // closed
		}
		dst, ok := pktinfoDst(oob[:oobn])
		if !ok {
			continue
		}
		s.count(UDP, peer.Addr().Unmap())
		line := s.line(peer, netip.AddrPortFrom(dst, port))
		// Best effort, like any UDP server.
		_, _, _ = conn.WriteMsgUDPAddrPort([]byte(line), pktinfoSrc(dst), peer)
	}
}

// pktinfoDst extracts the destination address from IPV6_PKTINFO.
func pktinfoDst(oob []byte) (netip.Addr, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo {
			var a [16]byte
			copy(a[:], m.Data[:16])
			return netip.AddrFrom16(a), true
		}
	}
	return netip.Addr{}, false
}

// pktinfoSrc builds an IPV6_PKTINFO control message selecting src (as a
// 16-byte address, v4-mapped for IPv4) as the source; interface 0 lets
// routing choose.
func pktinfoSrc(src netip.Addr) []byte {
	b := make([]byte, unix.CmsgSpace(unix.SizeofInet6Pktinfo))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.IPPROTO_IPV6
	h.Type = unix.IPV6_PKTINFO
	h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
	a := src.As16()
	copy(b[unix.CmsgLen(0):], a[:])
	return b
}

func (p *udpPort) Close() error {
	err := p.conn.Close()
	p.wg.Wait()
	return err
}
