package ipvs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// The kernel's IPVS connection table has no generic netlink dump (the genl
// ops in ip_vs_ctl.c cover services, destinations, daemons and timeouts
// only): /proc/net/ip_vs_conn is the one place that lists it, synced
// entries included. A director taking over FULLNAT connections reads it to
// learn which connections it must rebuild conntrack entries for.

// ConnectionLister lists the IPVS connection table. Kernel and ConnFake
// implement it.
type ConnectionLister interface {
	Connections(ctx context.Context) ([]Connection, error)
}

// ConnectionWalker calls f for each entry of the IPVS connection table
// without keeping the table (Kernel and ConnFake implement it): what a
// listing bounded to a few entries of millions needs.
type ConnectionWalker interface {
	EachConnection(ctx context.Context, f func(Connection)) error
}

// protoNames are ip_vs_proto_name's names of the protocols lvsd balances.
var protoNames = map[string]l4.Protocol{"TCP": l4.TCP, "UDP": l4.UDP, "SCTP": l4.SCTP, "IP": 0}

// ParseConnections reads the text of /proc/net/ip_vs_conn. Its lines are
// written by ip_vs_conn_seq_show (net/netfilter/ipvs/ip_vs_conn.c):
//
//	Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
//	TCP 0A000066 B3E2 0A000034 1B59 0A000002 1B59 ESTABLISHED     899
//
// IPv4 addresses as 8 hex digits in network order, IPv6 ones as %pI6
// (eight groups of 4 hex digits), ports as 4 hex digits, the expiry in
// seconds, and the persistence engine's data, if any, at the end. Lines of
// other protocols (ICMP) are skipped.
func ParseConnections(r io.Reader) ([]Connection, error) {
	var out []Connection
	err := ScanConnections(r, func(c Connection) { out = append(out, c) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ScanConnections reads the text of /proc/net/ip_vs_conn as
// ParseConnections does, calling f for each entry instead of keeping them:
// a table of a million entries is read in constant memory.
func ScanConnections(r io.Reader, f func(Connection)) error {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || n == 1 && fields[0] == "Pro" {
			continue
		}
		if len(fields) < 9 {
			return fmt.Errorf("ip_vs_conn line %d: %d fields, want at least 9: %q", n, len(fields), sc.Text())
		}
		proto, ok := protoNames[fields[0]]
		if !ok {
			continue
		}
		c, err := parseConnection(proto, fields)
		if err != nil {
			return fmt.Errorf("ip_vs_conn line %d: %w: %q", n, err, sc.Text())
		}
		f(c)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading ip_vs_conn: %w", err)
	}
	return nil
}

func parseConnection(proto l4.Protocol, f []string) (Connection, error) {
	c := Connection{Protocol: proto, State: f[7]}
	var err error
	for i, dst := range []*netip.AddrPort{&c.Client, &c.Virtual, &c.Dest} {
		if *dst, err = parseAddrPort(f[1+2*i], f[2+2*i]); err != nil {
			return Connection{}, err
		}
	}
	secs, err := strconv.ParseUint(f[8], 10, 32)
	if err != nil {
		return Connection{}, fmt.Errorf("expiry %q: %w", f[8], err)
	}
	c.Expires = time.Duration(secs) * time.Second
	return c, nil
}

func parseAddrPort(a, p string) (netip.AddrPort, error) {
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q: %w", p, err)
	}
	var addr netip.Addr
	if strings.Contains(a, ":") {
		addr, err = netip.ParseAddr(a) // %pI6 is a valid IPv6 text form
	} else {
		var v uint64
		if len(a) != 8 {
			return netip.AddrPort{}, fmt.Errorf("address %q: want 8 hex digits", a)
		}
		if v, err = strconv.ParseUint(a, 16, 32); err == nil {
			addr = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		}
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", a, err)
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// ConnFake is a connection table set by tests.
type ConnFake struct {
	mu    sync.Mutex // guards all following fields
	conns []Connection
	err   error
	calls int
}

var (
	_ ConnectionLister = (*ConnFake)(nil)
	_ ConnectionWalker = (*ConnFake)(nil)
)

// Set replaces the table; a non-nil err makes Connections fail instead.
func (f *ConnFake) Set(conns []Connection, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns, f.err = slices.Clone(conns), err
}

// Calls returns how many times Connections was called.
func (f *ConnFake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Connections implements ConnectionLister.
func (f *ConnFake) Connections(ctx context.Context) ([]Connection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.conns), nil
}

// EachConnection implements ConnectionWalker.
func (f *ConnFake) EachConnection(ctx context.Context, each func(Connection)) error {
	conns, err := f.Connections(ctx)
	if err != nil {
		return err
	}
	for _, c := range conns {
		each(c)
	}
	return nil
}
