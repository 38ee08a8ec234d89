package health

import (
	"context"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestICMPUnprivilegedSocket covers the SOCK_DGRAM ping socket, which most
// hosts (and CI) leave disabled by net.ipv4.ping_group_range. The sysctl is
// per network namespace, so the test enables it in a fresh one of its own
// instead of changing the host's.
func TestICMPUnprivilegedSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	type outcome struct {
		p   *pinger
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		// This goroutine's thread enters the new namespace and is never
		// unlocked, so Go discards the thread when the goroutine ends.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- outcome{err: err}
			return
		}
		// /proc/sys/net follows the namespace of the calling thread.
		if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 0"), 0); err != nil {
			done <- outcome{err: err}
			return
		}
		if err := loUp(); err != nil {
			done <- outcome{err: err}
			return
		}
		p, err := openPinger(false)
		done <- outcome{p, err}
	}()
	o := <-done
	if o.err != nil {
		t.Skipf("no namespace for the test: %v", o.err)
	}
	defer o.p.close()
	if !o.p.dgram {
		t.Fatal("opened a raw socket although ping_group_range allows a datagram one")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := o.p.ping(ctx, netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Fatalf("ping over a datagram socket: %v", err)
	}
}

// loUp brings up the loopback interface of the current namespace.
func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
