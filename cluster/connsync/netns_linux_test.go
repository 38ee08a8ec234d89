//go:build linux

package connsync

import (
	"bytes"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newNetns creates a network namespace with lo up, as a fresh director's
// has, and returns a descriptor for it. It skips the test without root.
func newNetns(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	var fd int
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread ends with the goroutine, so the
		// namespace change cannot leak into other goroutines.
		runtime.LockOSThread()
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return
		}
		if err = setLinkUp("lo"); err != nil {
			return
		}
		fd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}()
	<-done
	if errors.Is(err, unix.EPERM) {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func setLinkUp(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}

// inNetns runs f on a thread in namespace ns (see newNetns) and waits.
func inNetns(ns int, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, as in newNetns
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// masterSocket sends as the kernel's master daemon does (make_send_sock):
// IP_MULTICAST_IF lo, loop off, TTL 1, bound to lo's address, connected
// to the group.
func masterSocket(port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	lo, err := net.InterfaceByName("lo")
	if err == nil {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(lo.Index)})
	}
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 0)
	}
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	}
	if err == nil {
		err = unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: DefaultGroup.As4()})
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// backupSocket receives as the kernel's backup daemon does
// (make_receive_sock): bound to the group and port and to lo, joined on lo.
func backupSocket(port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	lo, err := net.InterfaceByName("lo")
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	}
	if err == nil {
		err = unix.BindToDevice(fd, "lo")
	}
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: DefaultGroup.As4()})
	}
	if err == nil {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &unix.IPMreqn{Multiaddr: DefaultGroup.As4(), Ifindex: int32(lo.Index)})
	}
	if err == nil {
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 500000})
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// recvWait returns the datagrams fd receives: it waits up to 5 s for the
// first n (they pass through goroutines on a loaded host), then takes what
// else comes until a read times out.
func recvWait(fd, n int) [][]byte {
	deadline := time.Now().Add(5 * time.Second)
	for got := [][]byte(nil); ; {
		got = append(got, recvAll(fd)...)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
	}
}

// recvAll returns the datagrams fd receives until a read times out.
func recvAll(fd int) [][]byte {
	var got [][]byte
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return got
		}
		got = append(got, bytes.Clone(buf[:n]))
	}
}
