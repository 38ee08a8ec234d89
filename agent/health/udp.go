package health

import (
	"bytes"
	"context"
	"net/netip"
	"strconv"
	"sync"
)

// udpChecker sends one datagram and waits for a reply. The socket is
// connected, so an ICMP port unreachable from the backend fails the check
// at once ("connection refused") instead of waiting for the timeout.
type udpChecker struct {
	dial   Dialer
	dst    netip.AddrPort // of Check; probe takes its own
	send   []byte
	expect []byte
}

// datagrams recycles receive buffers big enough for any UDP payload, so that
// a long reply is never cut short before ExpectData is searched.
var datagrams = sync.Pool{New: func() any { return new([65536]byte) }}

func (c *udpChecker) Check(ctx context.Context) Result { return c.probe(ctx, c.dst) }

func (c *udpChecker) probe(ctx context.Context, dst netip.AddrPort) Result {
	conn, err := c.dial.DialContext(ctx, "udp", dst.String())
	if err != nil {
		return dialFailed(ctx, "socket", err)
	}
	defer conn.Close()
	stop := setDeadline(ctx, conn)
	defer stop()
	if _, err := conn.Write(c.send); err != nil {
		return failed(describe(ctx, "send", err))
	}
	buf := datagrams.Get().(*[65536]byte)
	defer datagrams.Put(buf)
	n, err := conn.Read(buf[:])
	if err != nil {
		return failed(describe(ctx, "reply", err))
	}
	if !bytes.Contains(buf[:n], c.expect) {
		return failed("reply does not contain " + strconv.Quote(string(c.expect)))
	}
	return Result{OK: true}
}
