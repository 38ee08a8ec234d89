//go:build linux

package connsync

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSocketsOnLo checks the relay's own sockets in a fresh namespace: the
// reader hears a datagram sent to the master port on lo as the kernel
// sends it, and a backup-daemon-like socket hears the writer; neither
// hears the other port.
func TestSocketsOnLo(t *testing.T) {
	ns := newNetns(t)
	cfg := Config{Transport: &fakeTransport{}}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	err := inNetns(ns, func() error {
		in, out, err := openSockets(cfg)
		if err != nil {
			return err
		}
		defer in.Close()
		defer out.Close()
		master, err := masterSocket(8848)
		if err != nil {
			return err
		}
		defer unix.Close(master)
		backup, err := backupSocket(8849)
		if err != nil {
			return err
		}
		defer unix.Close(backup)

		if _, err := unix.Write(master, []byte("from the master")); err != nil {
			return err
		}
		if err := out.Write([]byte("for the backup")); err != nil {
			return err
		}
		in.(*net.UDPConn).SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, 100)
		n, err := in.Read(buf)
		if err != nil || string(buf[:n]) != "from the master" {
			t.Errorf("reader got %q, %v", buf[:n], err)
		}
		if n, err := in.Read(buf); err == nil {
			t.Errorf("reader also got %q", buf[:n])
		}
		got := recvAll(backup)
		if len(got) != 1 || string(got[0]) != "for the backup" {
			t.Errorf("backup socket got %q", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRelayBetweenNamespaces runs two relays with real sockets in two
// namespaces, joined by the in-memory transport: a datagram a master sends
// in one comes out to the backup socket in the other with its sync ID.
func TestRelayBetweenNamespaces(t *testing.T) {
	nsA, nsB := newNetns(t), newNetns(t)
	ta, tb := &fakeTransport{name: "a", peers: map[string]*Relay{}}, &fakeTransport{name: "b", peers: map[string]*Relay{}}
	a, err := New(Config{Transport: ta, SyncID: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Transport: tb, SyncID: 2})
	if err != nil {
		t.Fatal(err)
	}
	ta.peers["b"], tb.peers["a"] = b, a
	b.SetServices(testServices())
	opened := make(chan struct{}, 2)
	for _, r := range []*Relay{a, b} {
		r.open = func(cfg Config) (datagramReader, datagramWriter, error) {
			defer func() { opened <- struct{}{} }()
			return openSockets(cfg)
		}
	}

	var backup int
	if err := inNetns(nsB, func() (err error) { backup, err = backupSocket(8849); return err }); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(backup)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for _, x := range []struct {
		ns int
		r  *Relay
	}{{nsA, a}, {nsB, b}} {
		go func() { errs <- inNetns(x.ns, func() error { return x.r.Run(ctx) }) }()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}()
	<-opened
	<-opened

	c := tcp4("198.51.100.7", 40000)
	if err := inNetns(nsA, func() error {
		m, err := masterSocket(8848)
		if err != nil {
			return err
		}
		defer unix.Close(m)
		_, err = unix.Write(m, datagram(1, c.encode()))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got := recvWait(backup, 1)
	if want := datagram(2, c.encode()); len(got) != 1 || !bytes.Equal(got[0], want) {
		t.Fatalf("backup got % x\nwant % x", got, want)
	}
	// a counts what it sent after handing it over: it may not have yet.
	waitFor(t, func() bool { s := a.Stats(); return s.MasterRecords == 1 && s.SentRecords == 1 })
	if s := b.Stats(); s.AppliedRecords != 1 || s.MasterRecords != 0 {
		t.Errorf("b: %+v", s)
	}
}

// TestLoMulticastFacts pins what socket_linux.go relies on, measured on
// lo in a fresh namespace: lo has no MULTICAST flag; a send to the group
// fails without IP_MULTICAST_IF; with it, a datagram arrives exactly once
// whether the multicast loop is on or off, and only at a socket that
// joined the group on lo.
func TestLoMulticastFacts(t *testing.T) {
	ns := newNetns(t)
	err := inNetns(ns, func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		if lo.Flags&net.FlagMulticast != 0 {
			t.Errorf("lo has the MULTICAST flag: %v", lo.Flags)
		}
		joined, err := backupSocket(8849)
		if err != nil {
			return err
		}
		defer unix.Close(joined)
		for _, tt := range []struct {
			name   string
			setIf  bool
			loop   int
			sendOK bool
		}{
			{"no IP_MULTICAST_IF", false, 1, false},
			{"loop off", true, 0, true},
			{"loop on", true, 1, true},
		} {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if tt.setIf {
				if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(lo.Index)}); err != nil {
					return err
				}
			}
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, tt.loop); err != nil {
				return err
			}
			err = unix.Sendto(fd, []byte(tt.name), 0, &unix.SockaddrInet4{Port: 8849, Addr: DefaultGroup.As4()})
			unix.Close(fd)
			if tt.sendOK != (err == nil) || !tt.sendOK && !errors.Is(err, unix.ENETUNREACH) {
				t.Errorf("%s: send: %v", tt.name, err)
			}
			want := 0
			if tt.sendOK {
				want = 1
			}
			if got := recvAll(joined); len(got) != want {
				t.Errorf("%s: received %d datagrams, want %d", tt.name, len(got), want)
			}
		}
		// Without a join (and with IP_MULTICAST_ALL off) nothing arrives,
		// even though another socket joined the group on lo.
		in, err := listenGroup(lo, DefaultGroup, 8850)
		if err != nil {
			return err
		}
		defer in.Close()
		rc, err := in.SyscallConn()
		if err != nil {
			return err
		}
		if err := control(rc, func(fd int) error {
			return unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_DROP_MEMBERSHIP, &unix.IPMreqn{Multiaddr: DefaultGroup.As4(), Ifindex: int32(lo.Index)})
		}); err != nil {
			return err
		}
		out, err := dialGroup(lo, DefaultGroup, 8850)
		if err != nil {
			return err
		}
		defer out.Close()
		if err := out.Write([]byte("x")); err != nil {
			return err
		}
		in.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := in.Read(make([]byte, 10)); err == nil {
			t.Errorf("a socket that left the group received %d bytes", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
