//go:build linux

package connsync

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// The socket options below were measured in a fresh network namespace
// (socket_linux_test.go and the package doc). lo has no MULTICAST flag,
// yet:
//   - a socket that joins the group with lo's ifindex (struct ip_mreqn)
//     receives what is sent to the group on lo; without the join it
//     receives nothing;
//   - sending to the group fails with ENETUNREACH unless IP_MULTICAST_IF
//     names lo, as there is no multicast route;
//   - a datagram sent out lo arrives once whether IP_MULTICAST_LOOP is on
//     or off, since lo's output path is itself the loopback (the kernel's
//     master sends with the loop off and is still heard).

// readBuffer holds bursts from the master while Run is busy: about 900
// datagrams of 1,472 bytes.
const readBuffer = 4 << 20

func openSockets(cfg Config) (datagramReader, datagramWriter, error) {
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, nil, err
	}
	in, err := listenGroup(ifi, cfg.Group, cfg.MasterPort)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s:%d: %w", cfg.Group, cfg.MasterPort, err)
	}
	out, err := dialGroup(ifi, cfg.Group, cfg.BackupPort)
	if err != nil {
		in.Close()
		return nil, nil, fmt.Errorf("sending to %s:%d: %w", cfg.Group, cfg.BackupPort, err)
	}
	return in, out, nil
}

// listenGroup returns a socket that receives the datagrams sent to
// group:port on ifi, and only those.
func listenGroup(ifi *net.Interface, group netip.Addr, port uint16) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		// Not what reaches the group and port on another interface.
		return control(c, func(fd int) error { return unix.BindToDevice(fd, ifi.Name) })
	}}
	// Bound to the group address, so unicast to the port is not received;
	// Go sets SO_REUSEADDR for a multicast address.
	pc, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(group, port).String())
	if err != nil {
		return nil, err
	}
	conn := pc.(*net.UDPConn)
	rc, err := conn.SyscallConn()
	if err == nil {
		err = control(rc, func(fd int) error {
			// Only the groups this socket joined: by default a socket also
			// gets groups other sockets joined, such as the backup daemon.
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0); err != nil {
				return fmt.Errorf("IP_MULTICAST_ALL: %w", err)
			}
			mreq := unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifi.Index)}
			if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &mreq); err != nil {
				return fmt.Errorf("joining %s on %s: %w", group, ifi.Name, err)
			}
			// SO_RCVBUFFORCE passes net.core.rmem_max with CAP_NET_ADMIN.
			if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, readBuffer) != nil {
				_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, readBuffer)
			}
			return nil
		})
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// groupWriter sends datagrams to the group on one interface.
type groupWriter struct {
	conn *net.UDPConn
	dst  netip.AddrPort
}

func (w groupWriter) Write(b []byte) error {
	_, err := w.conn.WriteToUDPAddrPort(b, w.dst)
	return err
}

func (w groupWriter) Close() error { return w.conn.Close() }

// dialGroup returns a writer to group:port through ifi.
func dialGroup(ifi *net.Interface, group netip.Addr, port uint16) (groupWriter, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return control(c, func(fd int) error {
			mreq := unix.IPMreqn{Ifindex: int32(ifi.Index)}
			if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &mreq); err != nil {
				return fmt.Errorf("IP_MULTICAST_IF %s: %w", ifi.Name, err)
			}
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 1); err != nil {
				return fmt.Errorf("IP_MULTICAST_TTL: %w", err)
			}
			// Irrelevant on lo, but on an interface with the MULTICAST
			// flag the local backup daemon hears us only through the loop.
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 1); err != nil {
				return fmt.Errorf("IP_MULTICAST_LOOP: %w", err)
			}
			return nil
		})
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", "0.0.0.0:0")
	if err != nil {
		return groupWriter{}, err
	}
	return groupWriter{conn: pc.(*net.UDPConn), dst: netip.AddrPortFrom(group, port)}, nil
}

// control runs f on the socket's descriptor and returns either error.
func control(c syscall.RawConn, f func(fd int) error) error {
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
