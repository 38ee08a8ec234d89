package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// transport is memberlist's network layer for a node bound to one address:
// UDP for packets (heartbeats, gossip, connection sync), TCP for streams
// (joins, push-pull). memberlist's own NetTransport reads every UDP packet
// into a fresh 64 KB buffer; at heartbeats every 50 ms and connection sync
// at thousands of messages a second that was most of a director's garbage
// (a CPU profile of the ECMP lab: GC ~14 % of lvsd). This one reads into
// one buffer and hands memberlist a copy of the packet's own size.
type transport struct {
	udp      *net.UDPConn
	tcp      *net.TCPListener
	packets  chan *memberlist.Packet
	streams  chan net.Conn
	log      *slog.Logger
	stats    *portStats
	slots    chan struct{} // one per stream memberlist reads (maxStreams)
	stopping atomic.Bool
	stop     chan struct{} // closed by Shutdown: a reader blocked on a hand-over gives up
	wg       sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

const (
	// maxPacket is the largest UDP payload.
	maxPacket = 65536
	// udpReadBuffer is the socket's receive buffer, as NetTransport asks.
	udpReadBuffer = 2 << 20
)

// newTransport listens on bind (a specific address: the advertised one
// is the bound one) for UDP and TCP on the same port; port 0 picks one.
func newTransport(bind netip.AddrPort, log *slog.Logger, stats *portStats) (*transport, error) {
	if !bind.Addr().IsValid() || bind.Addr().IsUnspecified() {
		return nil, fmt.Errorf("cluster transport: bind %s is not one address", bind)
	}
	tcp, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(bind))
	if err != nil {
		return nil, fmt.Errorf("cluster: listening on TCP %s: %w", bind, err)
	}
	port := uint16(tcp.Addr().(*net.TCPAddr).Port)
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(bind.Addr(), port)))
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("cluster: listening on UDP %s: %w", bind, err)
	}
	for size := udpReadBuffer; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &transport{udp: udp, tcp: tcp, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), log: log,
		stats: stats, slots: make(chan struct{}, maxStreams), stop: make(chan struct{})}
	t.wg.Go(t.readPackets)
	t.wg.Go(t.accept)
	return t, nil
}

// port is the bound port (UDP and TCP).
func (t *transport) port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr implements memberlist.Transport: the given address,
// else the bound one.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip == "" {
		return t.tcp.Addr().(*net.TCPAddr).IP, t.port(), nil
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, 0, fmt.Errorf("advertise address %q: %w", ip, err)
	}
	return net.IP(a.Unmap().AsSlice()), port, nil
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	to, err := netip.ParseAddrPort(a.Addr)
	if err != nil {
		udp, rerr := net.ResolveUDPAddr("udp", a.Addr)
		if rerr != nil {
			return time.Time{}, rerr
		}
		to = udp.AddrPort()
	}
	_, err = t.udp.WriteToUDPAddrPort(b, to)
	return time.Now(), err
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes the sockets and waits for the readers.
func (t *transport) Shutdown() error {
	if t.stopping.Swap(true) {
		return nil
	}
	err := errors.Join(t.tcp.Close(), t.udp.Close())
	close(t.stop)
	t.wg.Wait()
	return err
}

// readPackets hands every UDP packet to memberlist, in a buffer of its own
// size (memberlist keeps it: user messages are decoded from it later).
func (t *transport) readPackets() {
	buf := make([]byte, maxPacket)
	for {
		n, from, err := t.udp.ReadFromUDPAddrPort(buf)
		at := time.Now()
		if err != nil {
			if t.stopping.Load() {
				return
			}
			t.log.Debug("cluster: reading a UDP packet", "err", err)
			continue
		}
		if n < 1 {
			continue
		}
		pkt := &memberlist.Packet{Buf: append([]byte(nil), buf[:n]...), From: net.UDPAddrFromAddrPort(from), Timestamp: at}
		select {
		case t.packets <- pkt:
		case <-t.stop:
			return
		}
	}
}

// accept hands TCP connections to memberlist, at most maxStreams at a
// time and each bounded (stream); the ones past the limit are closed at
// once, so that a stranger's connections cannot pile up. Each one waits
// for its first byte in a goroutine of its own (handOver).
func (t *transport) accept() {
	delay := time.Duration(0)
	for {
		c, err := t.tcp.Accept()
		if err != nil {
			if t.stopping.Load() {
				return
			}
			// Out of descriptors and the like: back off, as NetTransport does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("cluster: accepting a TCP connection", "err", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		select {
		case t.slots <- struct{}{}:
		default:
			t.stats.refusedStreams.Add(1) // counted, not logged: a flood would flood the log
			c.Close()
			continue
		}
		t.wg.Go(func() { t.handOver(c) })
	}
}

// handOver gives memberlist the stream c once its first byte has come.
func (t *transport) handOver(c net.Conn) {
	refuse := func() { t.stats.refusedStreams.Add(1) }
	release := func() { <-t.slots }
	s, ok := awaitFirstByte(c, time.Now(), refuse, release)
	if !ok {
		return
	}
	select {
	case t.streams <- s:
	case <-t.stop:
		s.Close()
	}
}
