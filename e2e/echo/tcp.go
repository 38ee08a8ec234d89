package echo

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"
)

// tcpPort is one plain TCP port with its open connections, so Stop can
// drop them.
type tcpPort struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func (s *Server) startTCP(port uint16) (*tcpPort, error) {
	ln, err := s.host.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, err
	}
	p := &tcpPort{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			if !p.track(c) {
				c.Close()
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.untrack(c)
				s.serveTCP(c)
			}()
		}
	}()
	return p, nil
}

// PeerNameQuery is the line a TCP server answers with "<name>: " and what
// getpeername() returns on the connection at that moment.
const PeerNameQuery = "peername?"

// serveTCP greets, then answers each line with "<name>: <line>" (the
// PeerNameQuery line with getpeername()'s answer).
func (s *Server) serveTCP(c net.Conn) {
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	s.count(TCP, peer.Addr().Unmap())
	w := bufio.NewWriter(c)
	hello := Reply{Name: s.Name, Peer: unmap(peer), Local: unmap(local), PeerName: peerName(c)}
	w.WriteString(hello.String() + "\n")
	if w.Flush() != nil {
		return
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		text := sc.Text()
		if text == PeerNameQuery { // asked again: what getpeername() says now
			text = peerName(c).String()
		}
		w.WriteString(s.Name + ": " + text + "\n")
		if w.Flush() != nil {
			return
		}
	}
}

func (p *tcpPort) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpPort) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close stops accepting, drops open connections and waits for the
// goroutines.
func (p *tcpPort) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
	return err
}

// peerName asks getpeername(2) itself: Go's RemoteAddr is what accept(2)
// returned.
func peerName(c net.Conn) netip.AddrPort {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}
	}
	var sa unix.Sockaddr
	if raw.Control(func(fd uintptr) { sa, err = unix.Getpeername(int(fd)) }) != nil || err != nil {
		return netip.AddrPort{}
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}
