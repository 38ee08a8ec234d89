//go:build vmtest

package nat

// The VM tier: real IPVS (the build hosts' kernel has none). Run with
//
//	go test -tags vmtest -count=1 -v -exec "$PWD/e2e/vm/run --" -run VM ./nat/
//
// from the repository root; e2e/vm/run boots a stock Debian kernel.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// requireIPVS is requireNetAdmin plus a kernel with IPVS: these tests run
// in the VM, where a missing IPVS is a broken setup, not a reason to skip.
func requireIPVS(t *testing.T) {
	t.Helper()
	requireNetAdmin(t)
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Fatalf("no IPVS in this kernel (%v): run this test in the VM (e2e/vm/run)", err)
	}
}

// TestVMFullNATAndFwmark builds, on one bridge:
//
//	cli  10.0.1.5 10.0.3.5 2001:db8:1::5 ── route 203.0.113.0/24, 2001:db8:f::/64 via dir
//	dir  10.0.1.1 10.0.3.1 10.0.2.1 + SNAT 10.0.2.100, 2001:db8:1::1 2001:db8:2::1 + SNAT 2001:db8:2::100;
//	     VIPs on lo; IPVS NAT services; lvsd's tables
//	rs1  10.0.2.11 2001:db8:2::11, rs2 10.0.2.12: no route but their own subnet
//
// and checks with real TCP connections that the real servers see the SNAT
// address, that fwmark services take a port range, and that source-range
// steering sends 10.0.1.0/24 to pool B and everyone else to pool A.
func TestVMFullNATAndFwmark(t *testing.T) {
	requireIPVS(t)
	ctx := context.Background()
	cli, dir, rs1, rs2 := newTestNS(t), newTestNS(t), newTestNS(t), newTestNS(t)
	ipBatch(t, "", fmt.Sprintf(`link add br0 type bridge
link set br0 up
link add c0 netns %s type veth peer name vc
link add d0 netns %s type veth peer name vd
link add r0 netns %s type veth peer name vr1
link add r0 netns %s type veth peer name vr2
link set vc master br0
link set vd master br0
link set vr1 master br0
link set vr2 master br0
link set vc up
link set vd up
link set vr1 up
link set vr2 up
`, cli.name, dir.name, rs1.name, rs2.name))
	t.Cleanup(func() { exec.Command("ip", "link", "del", "br0").Run() })
	ipBatch(t, cli.name, `addr add 10.0.1.5/24 dev c0
addr add 10.0.3.5/24 dev c0
addr add 2001:db8:1::5/64 dev c0 nodad
link set lo up
link set c0 up
route add 203.0.113.0/24 via 10.0.1.1
route add 2001:db8:f::/64 via 2001:db8:1::1
`)
	ipBatch(t, dir.name, `addr add 10.0.1.1/24 dev d0
addr add 10.0.3.1/24 dev d0
addr add 10.0.2.1/24 dev d0
addr add 10.0.2.100/32 dev d0
addr add 2001:db8:1::1/64 dev d0 nodad
addr add 2001:db8:2::1/64 dev d0 nodad
addr add 2001:db8:2::100/128 dev d0 nodad
addr add 203.0.113.10/32 dev lo
addr add 203.0.113.20/32 dev lo
addr add 203.0.113.30/32 dev lo
addr add 2001:db8:f::10/128 dev lo
link set lo up
link set d0 up
`)
	for _, rs := range []struct {
		ns       testNS
		v4, v6   string
		withIPv6 bool
	}{{rs1, "10.0.2.11/24", "2001:db8:2::11/64", true}, {rs2, "10.0.2.12/24", "", false}} {
		b := fmt.Sprintf("addr add %s dev r0\nlink set lo up\nlink set r0 up\n", rs.v4)
		if rs.withIPv6 {
			b += fmt.Sprintf("addr add %s dev r0 nodad\n", rs.v6)
		}
		ipBatch(t, rs.ns.name, b)
	}
	inNS(t, dir, func() {
		setSysctls(t, ForwardingSysctls(true, true, ""))
		setSysctls(t, FullNATSysctls())
		// dir forwards between subnets on one bridge port: no ICMP redirects.
		for _, k := range []string{"all", "d0"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+k+"/send_redirects", []byte("0"), 0); err != nil {
				t.Fatal(err)
			}
		}
	})
	// IPVS NAT (masquerade) services; marks 0x20 = 32, 0x30 = 48, 0x31 = 49.
	inNSRun(t, dir, "ipvsadm -R", `-A -t 203.0.113.10:80 -s rr
-a -t 203.0.113.10:80 -r 10.0.2.11:8080 -m
-a -t 203.0.113.10:80 -r 10.0.2.12:8080 -m
-A -f 32 -s rr
-a -f 32 -r 10.0.2.11:8080 -m
-A -f 48 -s rr
-a -f 48 -r 10.0.2.11:8080 -m
-A -f 49 -s rr
-a -f 49 -r 10.0.2.12:8080 -m
-A -t [2001:db8:f::10]:80 -s rr
-a -t [2001:db8:f::10]:80 -r [2001:db8:2::11]:8080 -m
`, "ipvsadm", "-R")
	serve(t, rs1, "rs1")
	serve(t, rs2, "rs2")

	// Control: without lvsd's SNAT the real server cannot answer the client.
	if got, err := fetch(t, cli, "10.0.1.5", "203.0.113.10:80", 2*time.Second); err == nil {
		t.Fatalf("without SNAT a connection worked (%q): the real server has a route to the client", got)
	} else {
		t.Logf("without SNAT: %v (expected: rs has no route back)", err)
	}

	fullnat := func(vip string, ports ...l4.PortRange) SNATRule {
		return SNATRule{Match: Match{VIP: addr(vip), Protocol: l4.TCP, Ports: ports}, CtMark: 0x10, To: addrs("10.0.2.100"), Comment: "fullnat " + vip}
	}
	spec := Spec{
		Marks: []MarkRule{
			{Match: Match{VIP: addr("203.0.113.20"), Protocol: l4.TCP, Ports: []l4.PortRange{{From: 8000, To: 8099}}}, Mark: 0x20, Comment: "port range"},
			{Match: Match{VIP: addr("203.0.113.30"), Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}}, Mark: 0x30, Comment: "pool A"},
			{Match: Match{VIP: addr("203.0.113.30"), Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}, Sources: prefixes("10.0.1.0/24")}, Mark: 0x31, Comment: "pool B"},
		},
		SNAT: []SNATRule{
			fullnat("203.0.113.10", port(80)),
			fullnat("203.0.113.20", l4.PortRange{From: 8000, To: 8099}),
			fullnat("203.0.113.30", port(80)),
			{Match: Match{VIP: addr("2001:db8:f::10"), Protocol: l4.TCP, Ports: []l4.PortRange{port(80)}}, CtMark: 0x10, To: addrs("2001:db8:2::100"), Comment: "fullnat v6"},
		},
	}
	rs := mustRender(t, spec)
	t.Logf("applying:\n%s", rs)
	if err := NewKernel(InNetNS(dir.fd)).Apply(ctx, rs); err != nil {
		t.Fatal(err)
	}
	listed := inNSRun(t, dir, "nft list", "", "nft", "list", "table", "ip", TableName) +
		inNSRun(t, dir, "nft list", "", "nft", "list", "table", "ip6", TableName)
	if listed != rs.String() {
		t.Errorf("nft list in the VM differs from Ruleset.String():\n%s", listed)
	}

	for _, c := range []struct{ what, src, dst, wantRS, wantPeer string }{
		{"FULLNAT, rr 1", "10.0.1.5", "203.0.113.10:80", "", "10.0.2.100"},
		{"FULLNAT, rr 2", "10.0.1.5", "203.0.113.10:80", "", "10.0.2.100"},
		{"fwmark range 8000", "10.0.1.5", "203.0.113.20:8000", "rs1", "10.0.2.100"},
		{"fwmark range 8050", "10.0.3.5", "203.0.113.20:8050", "rs1", "10.0.2.100"},
		{"fwmark range 8099", "10.0.1.5", "203.0.113.20:8099", "rs1", "10.0.2.100"},
		{"steering: client in 10.0.1.0/24", "10.0.1.5", "203.0.113.30:80", "rs2", "10.0.2.100"},
		{"steering: other client", "10.0.3.5", "203.0.113.30:80", "rs1", "10.0.2.100"},
		{"FULLNAT IPv6", "2001:db8:1::5", "[2001:db8:f::10]:80", "rs1", "2001:db8:2::100"},
	} {
		got, err := fetch(t, cli, c.src, c.dst, 5*time.Second)
		if err != nil {
			t.Errorf("%s: %s -> %s: %v", c.what, c.src, c.dst, err)
			continue
		}
		t.Logf("%s: %s -> %s: served by %q", c.what, c.src, c.dst, got)
		name, peer, _ := strings.Cut(got, " ")
		host, _, _ := net.SplitHostPort(peer)
		if c.wantRS != "" && name != c.wantRS || host != c.wantPeer {
			t.Errorf("%s: got %q, want %s seeing peer %s", c.what, got, c.wantRS, c.wantPeer)
		}
	}
	// Outside the range: no mark, no IPVS service, nothing listens on dir.
	if _, err := fetch(t, cli, "10.0.1.5", "203.0.113.20:8100", 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("port 8100 (outside 8000-8099): %v, want connection refused", err)
	}
	// The real servers really have no way back to the clients.
	for _, dst := range []string{"10.0.1.5:9", "10.0.3.5:9", "[2001:db8:1::5]:9"} {
		if _, err := fetch(t, rs1, "", dst, 2*time.Second); !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("rs1 dialing the client %s: %v, want network unreachable", dst, err)
		}
	}
	t.Logf("ipvsadm -Lnc on dir:\n%s", inNSRun(t, dir, "ipvsadm -Lnc", "", "ipvsadm", "-Lnc"))
}

// ipBatch runs `ip -b -` (in ns unless "") with the commands on stdin: one
// exec for many commands, because every exec is slow under TCG.
func ipBatch(t *testing.T, ns, cmds string) {
	t.Helper()
	args := []string{"-b", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdin = strings.NewReader(cmds)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s\ncommands:\n%s", strings.Join(args, " "), err, out, cmds)
	}
}

// inNSRun runs a command in ns (forked from a thread inside it, which saves
// the extra exec of `ip netns exec`) and returns its output.
func inNSRun(t *testing.T, ns testNS, what, stdin string, argv ...string) string {
	t.Helper()
	var out []byte
	var err error
	inNS(t, ns, func() {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		t.Fatalf("%s in %s: %v\n%s", what, ns.name, err, out)
	}
	return string(out)
}

// serve answers every connection to port 8080 in ns with "name peer". It
// listens on tcp4 and tcp6 explicitly: Go probes IPv6 support once per
// process, and a probe that ran in a namespace whose lo was down would make
// ":8080" an IPv4-only listener.
func serve(t *testing.T, ns testNS, name string) {
	t.Helper()
	for _, network := range []string{"tcp4", "tcp6"} {
		var ln net.Listener
		inNS(t, ns, func() {
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
				fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
				c.Close()
			}
		}()
	}
}

// fetch connects from src (any if "") in ns to dst and returns the first line.
func fetch(t *testing.T, ns testNS, src, dst string, timeout time.Duration) (string, error) {
	t.Helper()
	var line string
	var err error
	inNS(t, ns, func() {
		d := net.Dialer{Timeout: timeout}
		if src != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
		}
		var c net.Conn
		if c, err = d.Dial("tcp", dst); err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		line, err = bufio.NewReader(c).ReadString('\n')
		line = strings.TrimSpace(line)
	})
	return line, err
}

func prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}
