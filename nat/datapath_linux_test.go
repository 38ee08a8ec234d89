package nat

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/vishvananda/netns"
)

// TestKernelDataPath sends real packets through rules applied by Kernel on
// this host's kernel (no IPVS needed): source-range steering marks, and
// FULLNAT's ct mark + SNAT on plain forwarding, where the "real server"
// holds the VIP itself and has no route back to the client.
//
//	cli (203.0.113.5, .77, 192.0.2.50) ── dir (ip_forward, lvsd tables) ── rs (10.99.0.2, VIP 198.51.100.9 on lo)
func TestKernelDataPath(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	cli, dir, rs := newTestNS(t), newTestNS(t), newTestNS(t)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("link", "add", "c0", "netns", cli.name, "type", "veth", "peer", "name", "d0", "netns", dir.name)
	ip("link", "add", "d1", "netns", dir.name, "type", "veth", "peer", "name", "r0", "netns", rs.name)
	for _, c := range [][]string{
		{"-n", cli.name, "addr", "add", "203.0.113.5/24", "dev", "c0"},
		{"-n", cli.name, "addr", "add", "203.0.113.77/24", "dev", "c0"},
		{"-n", cli.name, "addr", "add", "192.0.2.50/24", "dev", "c0"},
		{"-n", dir.name, "addr", "add", "203.0.113.1/24", "dev", "d0"},
		{"-n", dir.name, "addr", "add", "192.0.2.1/24", "dev", "d0"},
		{"-n", dir.name, "addr", "add", "10.99.0.1/24", "dev", "d1"},
		{"-n", dir.name, "addr", "add", "10.99.0.100/32", "dev", "d1"},  // the SNAT address
		{"-n", dir.name, "addr", "add", "198.51.100.1/32", "dev", "lo"}, // the fwmark VIP
		{"-n", rs.name, "addr", "add", "10.99.0.2/24", "dev", "r0"},
		{"-n", rs.name, "addr", "add", "198.51.100.9/32", "dev", "lo"}, // the FULLNAT VIP
		{"-n", cli.name, "link", "set", "c0", "up"},
		{"-n", dir.name, "link", "set", "d0", "up"},
		{"-n", dir.name, "link", "set", "d1", "up"},
		{"-n", rs.name, "link", "set", "r0", "up"},
		{"-n", cli.name, "link", "set", "lo", "up"},
		{"-n", dir.name, "link", "set", "lo", "up"},
		{"-n", rs.name, "link", "set", "lo", "up"},
		{"-n", cli.name, "route", "add", "198.51.100.0/24", "via", "203.0.113.1"},
		{"-n", dir.name, "route", "add", "198.51.100.9/32", "via", "10.99.0.2"},
	} {
		ip(c...)
	}
	inNS(t, dir, func() {
		setSysctls(t, ForwardingSysctls(true, false, ""))
	})
	spec := Spec{
		Marks: steering,
		SNAT: []SNATRule{{Match: Match{VIP: addr("198.51.100.9"), Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}},
			CtMark: 0x10, To: addrs("10.99.0.100"), Comment: "fullnat"}},
	}
	if err := NewKernel(InNetNS(dir.fd)).Apply(ctx, mustRender(t, spec)); err != nil {
		t.Fatal(err)
	}
	// Count marks where IPVS would look at them (LOCAL_IN).
	dir.nftStdin(t, `table inet probe {
	chain input {
		type filter hook input priority filter; policy accept;
		tcp dport 80 meta mark 0x100 counter
		tcp dport 80 meta mark 0x101 counter
		tcp dport 80 meta mark 0x102 counter
		tcp dport 80 meta mark 0 counter
	}
}`)

	// Steering: nothing listens on 198.51.100.1:80 in dir, so each SYN is
	// answered with a RST: one counted packet per connection attempt.
	for _, src := range []string{"203.0.113.5", "203.0.113.77", "192.0.2.50"} {
		err := dialFrom(t, cli, src, "198.51.100.1:80")
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial from %s: %v, want connection refused", src, err)
		}
	}
	counters := probeCounters(t, dir)
	for mark, want := range map[string]string{"0x00000102": "1", "0x00000101": "1", "0x00000100": "1", "0x00000000": "0"} {
		if counters[mark] != want {
			t.Errorf("packets with mark %s at input: %s, want %s (all counters %v)", mark, counters[mark], want, counters)
		}
	}

	// FULLNAT: the real server sees the SNAT address, and the handshake
	// only completes because of it (rs has no route to 203.0.113.0/24).
	var ln net.Listener
	inNS(t, rs, func() {
		var err error
		if ln, err = net.Listen("tcp", "198.51.100.9:80"); err != nil {
			t.Fatal(err)
		}
	})
	defer ln.Close()
	peer := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			peer <- err.Error()
			return
		}
		peer <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		c.Close()
	}()
	if err := dialFrom(t, cli, "203.0.113.5", "198.51.100.9:80"); err != nil {
		t.Fatalf("FULLNAT connection: %v", err)
	}
	select {
	case p := <-peer:
		if p != "10.99.0.100" {
			t.Errorf("real server sees peer %s, want the SNAT address 10.99.0.100", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("real server accepted nothing")
	}
}

// inNS runs f on a thread switched into ns.
func inNS(t testing.TB, ns testNS, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(netns.NsHandle(ns.fd)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic("cannot return to the original netns: " + err.Error())
		}
	}()
	f()
}

// dialFrom connects from src in ns to dst and closes the connection.
func dialFrom(t *testing.T, ns testNS, src, dst string) error {
	t.Helper()
	var err error
	inNS(t, ns, func() {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		var c net.Conn
		if c, err = d.Dial("tcp", dst); err == nil {
			c.Close()
		}
	})
	return err
}

var counterRE = regexp.MustCompile(`meta mark (0x[0-9a-f]+) counter packets (\d+)`)

// probeCounters reads the probe table's per-mark packet counters.
func probeCounters(t *testing.T, ns testNS) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, s := range counterRE.FindAllStringSubmatch(ns.nft(t, "list", "table", "inet", "probe"), -1) {
		m[s[1]] = s[2]
	}
	return m
}
