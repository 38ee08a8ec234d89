//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// askTracked asks the echo service from src and returns the greeting with
// the connection's own address, port included, to compare with what the
// server saw.
func askTracked(ctx context.Context, host *topo.Host, src netip.Addr, dst netip.AddrPort) (echo.Reply, netip.AddrPort, error) {
	var c net.Conn
	err := host.Do(func() (err error) {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 5 * time.Second}
		c, err = d.DialContext(ctx, "tcp", dst.String())
		return err
	})
	if err != nil {
		return echo.Reply{}, netip.AddrPort{}, err
	}
	defer c.Close()
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return echo.Reply{}, local, err
	}
	r, err := echo.Parse(line)
	return r, local, err
}

// dropClientResets keeps the client's kernel from resetting the handshakes
// a rawTCP makes behind its back.
func dropClientResets(t *testing.T, client *topo.Host) {
	t.Helper()
	run(t, client, "nft", "add", "table", "inet", "toa_raw")
	run(t, client, "nft", "add", "chain", "inet", "toa_raw", "out", "{ type filter hook output priority 0; }")
	run(t, client, "nft", "add", "rule", "inet", "toa_raw", "out", "tcp", "flags", "&", "rst", "==", "rst", "drop")
	t.Cleanup(func() { client.Run(context.Background(), "nft", "delete", "table", "inet", "toa_raw") })
}

// rawTCP completes a TCP handshake by hand from a raw socket, so that the
// test chooses the options of the SYN and the ACK.
type rawTCP struct {
	fd       int
	src, dst netip.AddrPort
}

func newRawTCP(t *testing.T, host *topo.Host, src, dst netip.AddrPort) *rawTCP {
	t.Helper()
	family := unix.AF_INET
	if src.Addr().Is6() {
		family = unix.AF_INET6
	}
	var fd int
	err := host.Do(func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_RAW, unix.IPPROTO_TCP)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, rawSockaddr(src.Addr())); err != nil {
		t.Fatalf("binding the raw socket to %s: %v", src.Addr(), err)
	}
	tv := unix.Timeval{Usec: 300000}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &rawTCP{fd: fd, src: src, dst: dst}
}

func rawSockaddr(a netip.Addr) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Addr: a.As16()}
}

func (c *rawTCP) segment(seq, ack uint32, flags byte, options []byte) []byte {
	b := make([]byte, 20+len(options))
	binary.BigEndian.PutUint16(b[0:], c.src.Port())
	binary.BigEndian.PutUint16(b[2:], c.dst.Port())
	binary.BigEndian.PutUint32(b[4:], seq)
	binary.BigEndian.PutUint32(b[8:], ack)
	b[12] = byte(len(b)/4) << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 64240)
	copy(b[20:], options)
	var sum uint32
	add := func(p []byte) {
		for i := 0; i+1 < len(p); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(p[i:]))
		}
		if len(p)%2 == 1 {
			sum += uint32(p[len(p)-1]) << 8
		}
	}
	add(c.src.Addr().AsSlice())
	add(c.dst.Addr().AsSlice())
	add([]byte{0, unix.IPPROTO_TCP, byte(len(b) >> 8), byte(len(b))})
	add(b)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[16:], ^uint16(sum))
	return b
}

func (c *rawTCP) send(t *testing.T, seg []byte) {
	t.Helper()
	if err := unix.Sendto(c.fd, seg, 0, rawSockaddr(c.dst.Addr())); err != nil {
		t.Fatalf("sending from %s: %v", c.src, err)
	}
}

// handshake sends the SYN (resending it as a kernel would), answers the
// SYN-ACK with an ACK and returns once that is sent.
func (c *rawTCP) handshake(t *testing.T, synOptions, ackOptions []byte) {
	t.Helper()
	const iss = 0x1000
	const syn, ack = 0x02, 0x10
	first := c.segment(iss, 0, syn, synOptions)
	c.send(t, first)
	buf := make([]byte, 1500)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			c.send(t, first)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		seg := buf[:n]
		if c.src.Addr().Is4() { // IPv4 raw sockets hand over the IP header too
			seg = seg[int(seg[0]&0x0f)*4:]
		}
		if len(seg) < 20 || binary.BigEndian.Uint16(seg[0:]) != c.dst.Port() || binary.BigEndian.Uint16(seg[2:]) != c.src.Port() ||
			seg[13]&(syn|ack) != syn|ack || binary.BigEndian.Uint32(seg[8:]) != iss+1 {
			continue
		}
		c.send(t, c.segment(iss+1, binary.BigEndian.Uint32(seg[4:])+1, ack, ackOptions))
		return
	}
	t.Fatalf("no SYN-ACK from %s to %s", c.dst, c.src)
}

// toaConn is a connection the client opened to a TOA service, and the
// address it has on the client.
type toaConn struct {
	c     *echo.Conn
	local netip.AddrPort
}

// openTOAConns opens a connection from each source to dst, checks that the
// server's accept() and getpeername() gave the client's own address and
// port, and exchanges a line on each (its third packet, which makes the
// kernel sync it).
func openTOAConns(t *testing.T, client *topo.Host, srcs []netip.Addr, dst netip.AddrPort) []toaConn {
	t.Helper()
	var out []toaConn
	for _, src := range srcs {
		c, err := echo.Connect(t.Context(), client, src, dst)
		if err != nil {
			t.Fatalf("from %s: %v", src, err)
		}
		t.Cleanup(func() { c.Close() })
		local := netip.MustParseAddrPort(c.LocalAddr().String())
		if c.Hello.PeerName != local || c.Hello.Peer != local {
			t.Errorf("%s via %s: accept %s, getpeername %s; want the client's %s", src, c.Hello.Name, c.Hello.Peer, c.Hello.PeerName, local)
		}
		if err := c.Echo(t.Context(), "before"); err != nil {
			t.Fatal(err)
		}
		out = append(out, toaConn{c, local})
	}
	return out
}

// keptClientAddresses asks the server on each connection what
// getpeername() says now, fails the test for each that broke or lost its
// client's address (after says after what), and logs how many kept it.
func keptClientAddresses(t *testing.T, conns []toaConn, after string) {
	t.Helper()
	kept := 0
	for _, o := range conns {
		got, err := o.c.PeerName(t.Context())
		switch {
		case err != nil:
			t.Errorf("connection from %s after %s: %v", o.local, after, err)
		case got != o.local:
			t.Errorf("connection from %s after %s: getpeername %s", o.local, after, got)
		default:
			kept++
		}
	}
	t.Logf("%d of %d connections kept the client's address through %s", kept, len(conns), after)
}

// newClientAddresses opens a connection from each source to dst and checks
// that the server saw the client's own address and port.
func newClientAddresses(t *testing.T, client *topo.Host, srcs []netip.Addr, dst netip.AddrPort, after string) {
	t.Helper()
	for _, src := range srcs {
		r, local, err := askTracked(t.Context(), client, src, dst)
		if err != nil {
			t.Errorf("new connection from %s after %s: %v", src, after, err)
			continue
		}
		if r.Peer != local || r.PeerName != local {
			t.Errorf("new connection from %s after %s: accept %s, getpeername %s; want the client's %s", src, after, r.Peer, r.PeerName, local)
		}
	}
}
