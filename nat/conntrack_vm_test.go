//go:build vmtest

package nat

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// TestVMRestoreFullNATConntrack is a takeover in one director, with real
// IPVS: a FULLNAT connection runs, its conntrack entry is deleted (the new
// owner never had it), and the server speaks first: the guard drops its
// segment instead of the local stack resetting the connection. Then the
// entry is restored from the IPVS connection table; `conntrack -L` must
// show exactly the entry the kernel had made, and the server's
// retransmitted segment reaches the client. Both address families.
//
//	cli 10.0.1.5 2001:db8:1::5 ── dir (VIPs on lo, SNAT 10.0.2.100-101, 2001:db8:2::100) ── rs 10.0.2.11 2001:db8:2::11
func TestVMRestoreFullNATConntrack(t *testing.T) {
	requireIPVS(t)
	ctx := context.Background()
	cli, dir, rs := newTestNS(t), newTestNS(t), newTestNS(t)
	ipBatch(t, "", fmt.Sprintf(`link add br1 type bridge
link set br1 up
link add c0 netns %s type veth peer name vc1
link add d0 netns %s type veth peer name vd1
link add r0 netns %s type veth peer name vr1
link set vc1 master br1
link set vd1 master br1
link set vr1 master br1
link set vc1 up
link set vd1 up
link set vr1 up
`, cli.name, dir.name, rs.name))
	t.Cleanup(func() { exec.Command("ip", "link", "del", "br1").Run() })
	ipBatch(t, cli.name, `addr add 10.0.1.5/24 dev c0
addr add 2001:db8:1::5/64 dev c0 nodad
link set lo up
link set c0 up
route add 203.0.113.0/24 via 10.0.1.1
route add 2001:db8:f::/64 via 2001:db8:1::1
`)
	ipBatch(t, dir.name, `addr add 10.0.1.1/24 dev d0
addr add 10.0.2.1/24 dev d0
addr add 10.0.2.100/32 dev d0
addr add 10.0.2.101/32 dev d0
addr add 2001:db8:1::1/64 dev d0 nodad
addr add 2001:db8:2::1/64 dev d0 nodad
addr add 2001:db8:2::100/128 dev d0 nodad
addr add 203.0.113.10/32 dev lo
addr add 2001:db8:f::10/128 dev lo
link set lo up
link set d0 up
`)
	ipBatch(t, rs.name, `addr add 10.0.2.11/24 dev r0
addr add 2001:db8:2::11/64 dev r0 nodad
link set lo up
link set r0 up
`)
	inNS(t, dir, func() {
		setSysctls(t, ForwardingSysctls(true, true, ""))
		setSysctls(t, FullNATSysctls())
		for _, k := range []string{"all", "d0"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+k+"/send_redirects", []byte("0"), 0); err != nil {
				t.Fatal(err)
			}
		}
	})
	inNSRun(t, dir, "ipvsadm -R", `-A -t 203.0.113.10:80 -s rr
-a -t 203.0.113.10:80 -r 10.0.2.11:8080 -m
-A -t [2001:db8:f::10]:80 -s rr
-a -t [2001:db8:f::10]:80 -r [2001:db8:2::11]:8080 -m
`, "ipvsadm", "-R")
	rset := mustRender(t, Spec{SNAT: []SNATRule{
		{Match: Match{VIP: addr("203.0.113.10"), Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}}, CtMark: 0x10, To: addrs("10.0.2.100", "10.0.2.101"), Comment: "fullnat"},
		{Match: Match{VIP: addr("2001:db8:f::10"), Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}}, CtMark: 0x11, To: addrs("2001:db8:2::100"), Comment: "fullnat v6"},
	}})
	k := NewKernel(InNetNS(dir.fd))
	if err := k.Apply(ctx, rset); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 2)
	for _, network := range []string{"tcp4", "tcp6"} {
		var ln net.Listener
		inNS(t, rs, func() {
			var err error
			if ln, err = net.Listen(network, ":8080"); err != nil {
				t.Fatal(err)
			}
		})
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
	}
	ipvsK, err := ipvs.Open("/var/run/netns/" + dir.name)
	if err != nil {
		t.Fatal(err)
	}
	defer ipvsK.Close()

	for _, c := range []struct{ name, src, vip, family string }{
		{"IPv4", "10.0.1.5", "203.0.113.10", "ipv4"},
		{"IPv6", "2001:db8:1::5", "2001:db8:f::10", "ipv6"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vip := netip.AddrPortFrom(addr(c.vip), 80)
			var client net.Conn
			var err error
			inNS(t, cli, func() {
				d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.src)}}
				client, err = d.Dial("tcp", vip.String())
			})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server := <-accepted
			defer server.Close()
			t.Logf("the real server sees %s", server.RemoteAddr())
			exchange(t, client, server, "hello\n") // the client speaks first: established both ways
			exchange(t, server, client, "tick 0\n")
			listEntry := func() string {
				return conntrackList(t, dir, "-L", "-f", c.family, "-p", "tcp", "--orig-dst", c.vip)
			}
			made := listEntry()

			// The takeover: the entry is gone, the server speaks first.
			conntrackList(t, dir, "-D", "-f", c.family, "-p", "tcp", "--orig-dst", c.vip)
			if got := listEntry(); got != "" {
				t.Fatalf("entry still there after conntrack -D: %s", got)
			}
			if _, err := server.Write([]byte("tick 1\n")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // the first segment meets the guard
			if got := conntrackList(t, dir, "-L", "-f", c.family, "-p", "tcp"); got != "" {
				t.Errorf("the server's segment got an entry in the window: %s", got)
			}

			conns, err := ipvsK.Connections(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var es []ConntrackEntry
			for _, ic := range conns {
				if ic.Virtual != vip {
					continue
				}
				e, ok := rset.FullNATEntry(l4.Protocol(ic.Protocol), ic.Client, ic.Virtual, ic.Dest)
				if !ok {
					t.Fatalf("no FULLNAT rule for %+v", ic)
				}
				e.Timeout = ic.Expires
				es = append(es, e)
				t.Logf("IPVS connection %+v", ic)
			}
			start := time.Now()
			res, err := k.RestoreConntrack(ctx, es)
			if err != nil || counts(res) != (restoreCounts{Created: 1}) {
				t.Fatalf("RestoreConntrack(%v) = %+v, %v", es, res, err)
			}
			t.Logf("restored in %v", time.Since(start))
			if listEntry() == "" {
				t.Fatal("no entry right after the restore")
			}
			// The retransmission of "tick 1" now reaches the client.
			client.SetReadDeadline(time.Now().Add(5 * time.Second))
			if line, err := bufio.NewReader(client).ReadString('\n'); err != nil || line != "tick 1\n" {
				t.Fatalf("client read %q, %v after the restore; want the server's tick", line, err)
			}
			// Compared once a packet has passed: a restored entry is assured
			// only by its connection's first packet here (restoredStatus).
			restored := listEntry()
			t.Logf("kernel's entry: %s\nrestored entry: %s", made, restored)
			if normalizeCT(restored) != normalizeCT(made) || made == "" {
				t.Errorf("the restored entry differs from the kernel's:\n%s\n%s", restored, made)
			}
			exchange(t, client, server, "ack\n")
			exchange(t, server, client, "tick 2\n")
		})
	}
}

// exchange writes msg on from and reads it on to.
func exchange(t *testing.T, from, to net.Conn, msg string) {
	t.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	to.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := to.Read(buf); err != nil || string(buf) != msg {
		t.Fatalf("sent %q, read %q, %v", msg, buf, err)
	}
}

// conntrackList runs the conntrack CLI in ns and returns its entries (its
// summary line goes to stderr); deleting nothing is no error.
func conntrackList(t *testing.T, ns testNS, args ...string) string {
	t.Helper()
	var out []byte
	var err error
	inNS(t, ns, func() {
		out, err = exec.Command("conntrack", args...).Output()
	})
	if err != nil && args[0] != "-D" {
		t.Fatalf("conntrack %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// normalizeCT drops what differs between two listings of the same entry:
// the remaining timeout and the reference count.
func normalizeCT(line string) string {
	f := strings.Fields(line)
	var out []string
	for i, w := range f {
		if i == 2 || strings.HasPrefix(w, "use=") {
			continue
		}
		out = append(out, w)
	}
	return strings.Join(out, " ")
}
