package health

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// icmpChecker sends one echo request and waits for the reply.
type icmpChecker struct {
	p   *pingers
	dst netip.Addr
}

func (c *icmpChecker) Check(ctx context.Context) Result {
	return c.probe(ctx, netip.AddrPortFrom(c.dst, 0))
}

func (c *icmpChecker) probe(ctx context.Context, dst netip.AddrPort) Result {
	if err := c.p.ping(ctx, dst.Addr()); err != nil {
		return failed(describe(ctx, "echo", err))
	}
	return Result{OK: true}
}

// pingers holds one pinger per address family, opened on first use and
// closed when the Monitor stops. One socket per family rather than one per
// probe: a raw ICMP socket receives every ICMP packet of the host, so N
// probe sockets would each wake for N replies.
type pingers struct {
	mu     sync.Mutex // guards the following fields
	v4, v6 *pinger
	closed bool
}

var errStopped = errors.New("monitor stopped")

func (ps *pingers) ping(ctx context.Context, dst netip.Addr) error {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return errStopped
	}
	slot := &ps.v4
	if dst.Is6() {
		slot = &ps.v6
	}
	p := *slot
	if p == nil || p.failed() {
		var err error
		if p, err = openPinger(dst.Is6()); err != nil {
			ps.mu.Unlock()
			return err
		}
		*slot = p
	}
	ps.mu.Unlock()
	return p.ping(ctx, dst)
}

func (ps *pingers) close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.closed = true
	for _, p := range []*pinger{ps.v4, ps.v6} {
		if p != nil {
			p.close()
		}
	}
}

// pinger owns one ICMP socket and the goroutine reading it. It prefers an
// unprivileged ping socket (SOCK_DGRAM; the kernel then sets the echo ID
// and delivers only this socket's replies), allowed when the process's group
// is in net.ipv4.ping_group_range, and falls back to a raw socket, which
// needs CAP_NET_RAW. Replies are matched to probes by sequence number and
// source address.
type pinger struct {
	conn  *icmp.PacketConn
	v6    bool
	dgram bool
	id    int // echo ID (raw sockets only; the kernel picks it for dgram)
	done  chan struct{}

	mu   sync.Mutex // guards the following fields
	seq  uint16
	wait map[uint16]*echoWait
	err  error // set when the reader stopped
}

type echoWait struct {
	dst   netip.Addr
	reply chan struct{}
}

func openPinger(v6 bool) (*pinger, error) {
	network, addr := "udp4", "0.0.0.0"
	rawNet := "ip4:icmp"
	if v6 {
		network, addr, rawNet = "udp6", "::", "ip6:ipv6-icmp"
	}
	p := &pinger{v6: v6, dgram: true, id: rand.IntN(1 << 16), done: make(chan struct{}), wait: map[uint16]*echoWait{}}
	conn, err := icmp.ListenPacket(network, addr)
	if err != nil {
		p.dgram = false
		if conn, err = icmp.ListenPacket(rawNet, addr); err != nil {
			return nil, fmt.Errorf("no ICMP socket (needs CAP_NET_RAW or net.ipv4.ping_group_range): %w", err)
		}
		// Only echo replies wake the reader.
		if v6 {
			var f ipv6.ICMPFilter
			f.SetAll(true)
			f.Accept(ipv6.ICMPTypeEchoReply)
			conn.IPv6PacketConn().SetICMPFilter(&f)
		} else {
			var f ipv4.ICMPFilter
			f.SetAll(true)
			f.Accept(ipv4.ICMPTypeEchoReply)
			conn.IPv4PacketConn().SetICMPFilter(&f)
		}
	}
	p.conn = conn
	go p.read()
	return p, nil
}

func (p *pinger) failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err != nil
}

func (p *pinger) close() {
	p.conn.Close()
	<-p.done
}

// payload marks lvsd's probes for anyone watching with tcpdump.
var payload = []byte("lvsd health check")

func (p *pinger) ping(ctx context.Context, dst netip.Addr) error {
	dst = dst.Unmap()
	w := &echoWait{dst: dst.WithZone(""), reply: make(chan struct{})}
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return p.err
	}
	// At most a few thousand probes are in flight, so a free sequence
	// number is found at once; 65,536 in flight would be a bug.
	seq := p.seq
	for range 1 << 16 {
		seq++
		if p.wait[seq] == nil {
			break
		}
	}
	p.seq = seq
	p.wait[seq] = w
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.wait[seq] == w {
			delete(p.wait, seq)
		}
		p.mu.Unlock()
	}()

	var typ icmp.Type = ipv4.ICMPTypeEcho
	if p.v6 {
		typ = ipv6.ICMPTypeEchoRequest
	}
	// The checksum of ICMPv6 is filled in by the kernel.
	b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: p.id, Seq: int(seq), Data: payload}}).Marshal(nil)
	if err != nil {
		return err
	}
	var to net.Addr = &net.IPAddr{IP: dst.AsSlice(), Zone: dst.Zone()}
	if p.dgram {
		to = &net.UDPAddr{IP: dst.AsSlice(), Zone: dst.Zone()}
	}
	if _, err := p.conn.WriteTo(b, to); err != nil {
		return err
	}
	select {
	case <-w.reply:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read delivers echo replies to the probes waiting for them until the
// socket is closed.
func (p *pinger) read() {
	defer close(p.done)
	proto := 1 // ICMPv4
	if p.v6 {
		proto = 58
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := p.conn.ReadFrom(buf)
		if err != nil {
			p.mu.Lock()
			p.err = fmt.Errorf("ICMP socket: %w", err)
			p.mu.Unlock()
			if !errors.Is(err, net.ErrClosed) {
				p.conn.Close() // the next probe opens a new one
			}
			return
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || (m.Type != ipv4.ICMPTypeEchoReply && m.Type != ipv6.ICMPTypeEchoReply) {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok || (!p.dgram && echo.ID != p.id) {
			continue // another process's ping on the raw socket
		}
		var src netip.Addr
		switch a := from.(type) {
		case *net.IPAddr:
			src, _ = netip.AddrFromSlice(a.IP)
		case *net.UDPAddr:
			src, _ = netip.AddrFromSlice(a.IP)
		}
		seq := uint16(echo.Seq)
		p.mu.Lock()
		if w := p.wait[seq]; w != nil && w.dst == src.Unmap() {
			delete(p.wait, seq)
			close(w.reply)
		}
		p.mu.Unlock()
	}
}
