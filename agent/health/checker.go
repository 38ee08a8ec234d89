package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// newChecker is the default Factory: one Checker type per protocol, each
// prepared once per target so that a round does no parsing or formatting
// beyond the probe itself. A check the config layer should have rejected
// becomes a Checker that always fails with the reason.
func (m *Monitor) newChecker(t *Target, c *Check) Checker {
	dst := t.dst(c)
	var (
		ch  Checker
		err error
	)
	switch c.Type {
	case "tcp":
		ch = &tcpChecker{dial: m.dialer, addr: dst.String()}
	case "http", "https":
		ch, err = newHTTPChecker(m.dialer, dst, c, m.reuse)
	case "udp":
		ch = &udpChecker{dial: m.dialer, addr: dst.String(), send: c.Send, expect: c.ExpectData}
	case "dns":
		ch, err = newDNSChecker(m.dialer, dst, c)
	case "icmp":
		ch = &icmpChecker{p: m.icmp, dst: dst.Addr()}
	case "exec":
		ch, err = newExecChecker(t, dst, c)
	default:
		err = fmt.Errorf("unknown check type %q", c.Type)
	}
	if err != nil {
		reason := "invalid check: " + err.Error()
		return CheckerFunc(func(context.Context) Result { return failed(reason) })
	}
	return ch
}

// dialFailed is the Result of a check whose socket could not be opened or
// connected: Local when the host ran out of descriptors, not the target.
func dialFailed(ctx context.Context, what string, err error) Result {
	r := failed(describe(ctx, what, err))
	r.Local = localFailure(err)
	return r
}

// describe turns a probe error into a short reason. Timeouts all read the
// same whichever deadline (dial, read, context) fired first.
func describe(ctx context.Context, what string, err error) string {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(ctx.Err() != nil && !errors.Is(err, syscall.ECONNREFUSED)) {
		return what + ": timed out"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err // drop "dial tcp 10.0.0.1:80:", the target is already named
		var sys *os.SyscallError
		if errors.As(err, &sys) {
			err = sys.Err // "connection refused" rather than "connect: connection refused"
		}
	}
	return what + ": " + err.Error()
}

// setDeadline bounds all I/O on conn by ctx: its deadline, and its
// cancellation (the target was removed or the Monitor is stopping). The
// returned function must be called before conn is closed.
func setDeadline(ctx context.Context, conn net.Conn) (stop func() bool) {
	dl, _ := ctx.Deadline() // none: the zero time clears a kept connection's old deadline
	conn.SetDeadline(dl)
	return context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
}

// tcpChecker passes when a TCP connection can be established.
type tcpChecker struct {
	dial Dialer
	addr string
}

func (c *tcpChecker) Check(ctx context.Context) Result {
	conn, err := c.dial.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return dialFailed(ctx, "connect", err)
	}
	conn.Close()
	return Result{OK: true}
}
