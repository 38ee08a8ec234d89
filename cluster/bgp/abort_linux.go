package bgp

import (
	"errors"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// shutdownSessions shuts down (both directions) every TCP socket of this
// process that is a BGP session with a configured peer: one to the peer's
// port, or one the peer opened to ListenPort. GoBGP has no call that
// closes a session without a NOTIFICATION, and its sockets are its own,
// so they are found by their addresses among the process's descriptors.
// A shut-down socket sends a FIN and accepts no more writes: GoBGP's
// reader ends, and the Cease StopBgp sends later goes nowhere.
func shutdownSessions(c Config) (int, error) {
	ports := map[netip.Addr]uint16{}
	for _, p := range c.Peers {
		ports[p.Address] = p.Port
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		if !isSession(fd, ports, c.ListenPort) {
			continue
		}
		if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil && !errors.Is(err, unix.ENOTCONN) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// isSession reports whether fd is a connected TCP socket with a peer of
// ports, on the peer's port or on listenPort here.
func isSession(fd int, ports map[netip.Addr]uint16, listenPort uint16) bool {
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_STREAM {
		return false
	}
	remote, err := unix.Getpeername(fd)
	if err != nil {
		return false
	}
	raddr, rport, ok := sockaddrAddrPort(remote)
	if !ok {
		return false
	}
	port, known := ports[raddr]
	if !known {
		return false
	}
	if rport == port {
		return true
	}
	local, err := unix.Getsockname(fd)
	if err != nil {
		return false
	}
	_, lport, ok := sockaddrAddrPort(local)
	return ok && listenPort != 0 && lport == listenPort
}

func sockaddrAddrPort(sa unix.Sockaddr) (netip.Addr, uint16, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr), uint16(a.Port), true
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port), true
	}
	return netip.Addr{}, 0, false
}
