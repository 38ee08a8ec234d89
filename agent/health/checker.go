package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// newChecker is the default Factory: one Checker type per protocol, each
// prepared once per target so that a round does no parsing or formatting
// beyond the probe itself. A check the config layer should have rejected
// becomes a Checker that always fails with the reason. The Monitor itself
// only calls it for the checks that keep something per target (http and
// https their connection, exec its environment); the others are probers.
func (m *Monitor) newChecker(t *Target, c *Check) Checker {
	dst := t.dst(c)
	if p := m.newProber(c); p != nil {
		return boundProber{p, dst}
	}
	var (
		ch  Checker
		err error
	)
	switch c.Type {
	case "http", "https":
		ch, err = newHTTPChecker(m.dialer, dst, c, m.reuse)
	case "exec":
		ch, err = newExecChecker(t, dst, c)
	}
	if err != nil {
		return failing("invalid check: " + err.Error())
	}
	return ch
}

// A prober runs one check on any target, given where the check goes: a
// check that keeps nothing per target has one prober for every target of
// a spec, where a Checker per target would cost each of them its memory.
// Like a Checker, it must not keep anything open once probe returns; it
// may be used by many goroutines at once.
type prober interface {
	probe(ctx context.Context, dst netip.AddrPort) Result
}

// newProber returns the prober of c, or nil when c needs a Checker per
// target (http, https, exec).
func (m *Monitor) newProber(c *Check) prober {
	switch c.Type {
	case "tcp":
		return tcpChecker{dial: m.dialer}
	case "udp":
		return &udpChecker{dial: m.dialer, send: c.Send, expect: c.ExpectData}
	case "dns":
		ch, err := newDNSChecker(m.dialer, netip.AddrPort{}, c)
		if err != nil {
			return failing("invalid check: " + err.Error())
		}
		return ch
	case "icmp":
		return &icmpChecker{p: m.icmp}
	case "http", "https", "exec":
		return nil
	default:
		return failing(fmt.Sprintf("invalid check: unknown check type %q", c.Type))
	}
}

// failing is a check that always fails with its reason.
type failing string

func (f failing) Check(context.Context) Result                 { return failed(string(f)) }
func (f failing) probe(context.Context, netip.AddrPort) Result { return failed(string(f)) }

// boundProber is a prober as the Checker of one destination.
type boundProber struct {
	p   prober
	dst netip.AddrPort
}

func (b boundProber) Check(ctx context.Context) Result { return b.p.probe(ctx, b.dst) }

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
}

func (c tcpChecker) probe(ctx context.Context, dst netip.AddrPort) Result {
	conn, err := c.dial.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		return dialFailed(ctx, "connect", err)
	}
	conn.Close()
	return Result{OK: true}
}
