//go:build e2e

package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/e2e/topo"
)

// serveSCTP answers every SCTP association to port (one-to-one style, on
// any address of each host: the DR VIP on lo included) with the host's ID,
// then closes it. The listeners stop with the test.
func serveSCTP(t *testing.T, port uint16, hosts ...*topo.Host) {
	t.Helper()
	for _, h := range hosts {
		var fd int
		err := h.Do(func() error {
			var err error
			if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP); err != nil {
				return err
			}
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
				return err
			}
			if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port)}); err != nil {
				return err
			}
			return unix.Listen(fd, 64)
		})
		if err != nil {
			t.Fatalf("%s: SCTP listener on port %d: %v", h.ID, port, err)
		}
		// A blocked accept on an SCTP socket wakes neither for shutdown nor
		// for close: the loop polls, and looks at stop between polls.
		stop, done := make(chan struct{}), make(chan struct{})
		go func(id string) {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				if n, err := unix.Poll(pfd, 100); err != nil || n == 0 {
					continue
				}
				c, _, err := unix.Accept(fd)
				if err != nil {
					continue
				}
				_, _ = retryEINTR(func() (int, error) { return unix.Write(c, []byte(id)) })
				unix.Close(c)
			}
		}(h.ID)
		t.Cleanup(func() {
			close(stop)
			<-done
			unix.Close(fd)
		})
	}
}

// askSCTP opens an SCTP association from src (in client's namespace) to dst
// and returns the name the server answered with.
func askSCTP(client *topo.Host, src netip.Addr, dst netip.AddrPort) (string, error) {
	var name string
	err := client.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		tv := unix.Timeval{Sec: 5}
		for _, opt := range []int{unix.SO_SNDTIMEO, unix.SO_RCVTIMEO} { // connect and read
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
				return err
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
			return err
		}
		if err := connectSCTP(fd, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}); err != nil {
			return err
		}
		buf := make([]byte, 64)
		n, err := retryEINTR(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil {
			return err
		}
		name = strings.TrimSpace(string(buf[:n]))
		return nil
	})
	return name, err
}

// The test's raw system calls block in the kernel, where the Go runtime's
// preemption signal can interrupt them (EINTR; seen once in CI on
// connect): they are restarted, which the standard library does for its
// own sockets.

// retryEINTR calls f until it is not interrupted.
func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// connectSCTP connects the blocking socket fd to sa. An interrupted
// connect goes on in the kernel, so it is not started again: the
// socket's writability says when it ended and SO_ERROR how (within the
// socket's send timeout).
func connectSCTP(fd int, sa unix.Sockaddr) error {
	err := unix.Connect(fd, sa)
	if err != unix.EINTR {
		return err
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		n, err := unix.Poll(pfd, 5000)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return unix.ETIMEDOUT
		}
		break
	}
	if soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil {
		return err
	} else if soErr != 0 {
		return unix.Errno(soErr)
	}
	return nil
}
