package toa

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawClient completes TCP handshakes by hand from a raw socket, so a test
// chooses the SYN's options (a forged TOA option, 40 bytes of options) and
// computes every checksum itself: no offload completes them later, and the
// server's kernel verifies what the director's program wrote.
type rawClient struct {
	fd       int
	src, dst netip.AddrPort
}

func newRawClient(t *testing.T, tp topo, src, dst netip.AddrPort) *rawClient {
	t.Helper()
	family := unix.AF_INET
	if src.Addr().Is6() {
		family = unix.AF_INET6
	}
	var (
		fd  int
		err error
	)
	in(t, tp.client, func() { fd, err = unix.Socket(family, unix.SOCK_RAW, unix.IPPROTO_TCP) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(src.Addr(), 0))); err != nil {
		t.Fatalf("binding the raw socket to %s: %v", src.Addr(), err)
	}
	tv := unix.Timeval{Sec: 0, Usec: 200000}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &rawClient{fd: fd, src: src, dst: dst}
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16()}
}

const (
	flagSYN = 0x02
	flagACK = 0x10
)

// segment builds a TCP segment with a correct checksum.
func (c *rawClient) segment(seq, ack uint32, flags byte, options []byte) []byte {
	b := make([]byte, 20+len(options))
	binary.BigEndian.PutUint16(b[0:], c.src.Port())
	binary.BigEndian.PutUint16(b[2:], c.dst.Port())
	binary.BigEndian.PutUint32(b[4:], seq)
	binary.BigEndian.PutUint32(b[8:], ack)
	b[12] = byte(len(b)/4) << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 64240)
	copy(b[20:], options)
	binary.BigEndian.PutUint16(b[16:], tcpChecksum(c.src.Addr(), c.dst.Addr(), b))
	return b
}

func tcpChecksum(src, dst netip.Addr, seg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	var proto [4]byte
	proto[1] = unix.IPPROTO_TCP
	binary.BigEndian.PutUint16(proto[2:], uint16(len(seg)))
	add(proto[:])
	add(seg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func (c *rawClient) send(t *testing.T, seg []byte) {
	t.Helper()
	if err := unix.Sendto(c.fd, seg, 0, sockaddr(netip.AddrPortFrom(c.dst.Addr(), 0))); err != nil {
		t.Fatalf("sending from %s: %v", c.src, err)
	}
}

// handshake sends a SYN with options, waits for the SYN-ACK and
// acknowledges it (with ackOptions), so that the server accepts.
func (c *rawClient) handshake(t *testing.T, synOptions, ackOptions []byte) {
	t.Helper()
	const iss = 0x1000
	syn := c.segment(iss, 0, flagSYN, synOptions)
	deadline := time.Now().Add(5 * time.Second)
	c.send(t, syn)
	buf := make([]byte, 1500)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			c.send(t, syn) // as a client's kernel would retransmit
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		seg := buf[:n]
		if c.src.Addr().Is4() { // IPv4 raw sockets hand over the IP header too
			seg = seg[int(seg[0]&0x0f)*4:]
		}
		if len(seg) < 20 || binary.BigEndian.Uint16(seg[0:]) != c.dst.Port() || binary.BigEndian.Uint16(seg[2:]) != c.src.Port() {
			continue
		}
		if seg[13]&(flagSYN|flagACK) != flagSYN|flagACK || binary.BigEndian.Uint32(seg[8:]) != iss+1 {
			continue
		}
		c.send(t, c.segment(iss+1, binary.BigEndian.Uint32(seg[4:])+1, flagACK, ackOptions))
		return
	}
	t.Fatalf("no SYN-ACK from %s to %s", c.dst, c.src)
}
