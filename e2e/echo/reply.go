// Package echo is a tiny real server for lvsd end-to-end tests, and the
// client side to query it.
//
// Every answer names the server, the peer address it saw and the local
// address the connection or datagram arrived at, as one line:
//
//	name=rs1 peer=10.0.0.100:41234 local=10.0.0.50:80 peername=10.0.0.100:41234
//
// so a test learns which real server it reached, whether the client address
// survived (DR, NAT) or was replaced (FULLNAT/SNAT), and which VIP was used.
// peer is what accept() returned; plain TCP adds peername, what
// getpeername() returns on the accepted socket (the two differ only if
// something hooks one of them, as a cgroup BPF program can).
//
// Protocols: plain TCP writes that line on connect, then answers every line
// it reads with "<name>: <line>" (a long-lived connection can be checked
// later); HTTP answers GET / with the line and GET /healthz with 200 "ok"
// (or 503 when SetHealthy(false)); UDP answers every datagram with the line.
package echo

import (
	"fmt"
	"net/netip"
	"strings"
)

// Reply is one parsed answer line.
type Reply struct {
	Name  string         // server name
	Peer  netip.AddrPort // client address as the server saw it
	Local netip.AddrPort // address the request arrived at (e.g. the VIP)
	// PeerName is what getpeername() returned (plain TCP only; zero for the
	// others and from servers that predate it).
	PeerName netip.AddrPort
}

// String formats r as the wire line, without newline.
func (r Reply) String() string {
	line := fmt.Sprintf("name=%s peer=%s local=%s", r.Name, r.Peer, r.Local)
	if r.PeerName.IsValid() {
		line += " peername=" + r.PeerName.String()
	}
	return line
}

// Parse parses an answer line; surrounding white space is ignored, unknown
// fields too (room for later additions).
func Parse(line string) (Reply, error) {
	var r Reply
	var err error
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Reply{}, fmt.Errorf("echo: bad field %q in %q", f, line)
		}
		switch k {
		case "name":
			r.Name = v
		case "peer":
			r.Peer, err = netip.ParseAddrPort(v)
		case "local":
			r.Local, err = netip.ParseAddrPort(v)
		case "peername":
			r.PeerName, err = netip.ParseAddrPort(v)
		}
		if err != nil {
			return Reply{}, fmt.Errorf("echo: %s in %q: %w", k, line, err)
		}
	}
	if r.Name == "" || !r.Peer.IsValid() || !r.Local.IsValid() {
		return Reply{}, fmt.Errorf("echo: incomplete reply %q", line)
	}
	return r, nil
}

// unmap turns IPv4-mapped IPv6 addresses (as seen on dual-stack sockets)
// back into IPv4.
func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
