//go:build linux

package bfd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

const (
	srcPortMin    = 49152 // RFC 5881 §4: source ports 49152–65535
	srcPortCount  = 65536 - srcPortMin
	tosNetControl = 0xc0 // CS6, as routers send their control traffic
	readSize      = 512
)

type udpTransport struct {
	log     *slog.Logger
	packets chan Datagram
	done    chan struct{}

	mu        sync.Mutex // guards all following fields
	listeners [2]net.PacketConn
	closed    bool
	wg        sync.WaitGroup
}

func newUDPTransport(log *slog.Logger) (Transport, error) {
	return &udpTransport{log: log, packets: make(chan Datagram, 64), done: make(chan struct{})}, nil
}

func (t *udpTransport) Packets() <-chan Datagram { return t.packets }

// listen opens the receiving socket of one family on first use.
func (t *udpTransport) listen(v6 bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	i, network, addr := 0, "udp4", fmt.Sprintf("0.0.0.0:%d", ControlPort)
	if v6 {
		i, network, addr = 1, "udp6", fmt.Sprintf("[::]:%d", ControlPort)
	}
	if t.listeners[i] != nil {
		return nil
	}
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("listening on %s %s: %w (another BFD daemon, such as FRR's bfdd, runs in this network namespace?)",
				network, addr, err)
		}
		return fmt.Errorf("listening on %s %s: %w", network, addr, err)
	}
	var read func([]byte) (int, int, netip.Addr, netip.Addr, error)
	if v6 {
		p := ipv6.NewPacketConn(pc)
		err = p.SetControlMessage(ipv6.FlagHopLimit|ipv6.FlagDst, true)
		read = func(b []byte) (int, int, netip.Addr, netip.Addr, error) {
			n, cm, src, err := p.ReadFrom(b)
			if cm == nil {
				return n, 0, addrOf(src), netip.Addr{}, err
			}
			dst, _ := netip.AddrFromSlice(cm.Dst)
			return n, cm.HopLimit, addrOf(src), dst.Unmap(), err
		}
	} else {
		p := ipv4.NewPacketConn(pc)
		err = p.SetControlMessage(ipv4.FlagTTL|ipv4.FlagDst, true)
		read = func(b []byte) (int, int, netip.Addr, netip.Addr, error) {
			n, cm, src, err := p.ReadFrom(b)
			if cm == nil {
				return n, 0, addrOf(src), netip.Addr{}, err
			}
			dst, _ := netip.AddrFromSlice(cm.Dst)
			return n, cm.TTL, addrOf(src), dst.Unmap(), err
		}
	}
	if err != nil {
		pc.Close()
		return fmt.Errorf("%s %s: asking for the TTL of received packets: %w", network, addr, err)
	}
	t.listeners[i] = pc
	t.wg.Add(1)
	go t.readLoop(read)
	return nil
}

func addrOf(a net.Addr) netip.Addr {
	if u, ok := a.(*net.UDPAddr); ok {
		ip, _ := netip.AddrFromSlice(u.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

func (t *udpTransport) readLoop(read func([]byte) (int, int, netip.Addr, netip.Addr, error)) {
	defer t.wg.Done()
	buf := make([]byte, readSize)
	for {
		n, ttl, src, dst, err := read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Debug("bfd: read", "err", err)
			continue
		}
		d := Datagram{Data: append([]byte(nil), buf[:n]...), Src: src, Dst: dst, TTL: ttl, At: time.Now()}
		select {
		case t.packets <- d:
		case <-t.done:
			return
		}
	}
}

// Open dials peer:3784 from a random free port in 49152–65535.
func (t *udpTransport) Open(local, peer netip.Addr, ifname string) (Conn, error) {
	if err := t.listen(peer.Is6()); err != nil {
		return nil, err
	}
	network := "udp4"
	if peer.Is6() {
		network = "udp6"
	}
	dst := netip.AddrPortFrom(peer, ControlPort)
	if peer.Is6() && peer.IsLinkLocalUnicast() {
		dst = netip.AddrPortFrom(peer.WithZone(ifname), ControlPort)
	}
	var lastErr error
	for range 64 {
		d := net.Dialer{
			LocalAddr: &net.UDPAddr{IP: local.AsSlice(), Port: srcPortMin + rand.IntN(srcPortCount)},
			Control: func(_, _ string, c syscall.RawConn) error {
				return rawControl(c, func(fd int) error { return sessionSockopts(fd, peer.Is6(), ifname) })
			},
		}
		c, err := d.DialContext(context.Background(), network, dst.String())
		if err == nil {
			return udpConn{c}, nil
		}
		lastErr = err
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("opening a socket to %s: %w", dst, lastErr)
}

// sessionSockopts: TTL 255 (RFC 5881 §5), network-control class, device.
func sessionSockopts(fd int, v6 bool, ifname string) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, gtsmTTL); err != nil {
			return fmt.Errorf("IPV6_UNICAST_HOPS: %w", err)
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tosNetControl)
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, gtsmTTL); err != nil {
			return fmt.Errorf("IP_TTL: %w", err)
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, tosNetControl)
	}
	if ifname != "" {
		if err := unix.BindToDevice(fd, ifname); err != nil {
			return fmt.Errorf("binding to %s: %w", ifname, err)
		}
	}
	return nil
}

func rawControl(c syscall.RawConn, f func(fd int) error) error {
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func (t *udpTransport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	var errs []error
	for _, l := range t.listeners {
		if l != nil {
			errs = append(errs, l.Close())
		}
	}
	t.mu.Unlock()
	t.wg.Wait()
	return errors.Join(errs...)
}

type udpConn struct{ c net.Conn }

func (u udpConn) Send(b []byte) error {
	_, err := u.c.Write(b)
	return err
}

func (u udpConn) Close() error { return u.c.Close() }
