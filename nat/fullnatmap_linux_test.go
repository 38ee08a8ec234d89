package nat

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
)

// fullnatTopo is a client, a director and a real server in three network
// namespaces; the real server holds the VIP and has no route to the client,
// so only source-NATed connections work.
//
//	cli (203.0.113.5) ── dir (ip_forward; SNAT 10.99.0.100, .101) ── rs (10.99.0.2, VIP 198.51.100.9 on lo)
type fullnatTopo struct{ cli, dir, rs testNS }

func newFullNATTopo(t testing.TB) fullnatTopo {
	t.Helper()
	tp := fullnatTopo{newTestNS(t), newTestNS(t), newTestNS(t)}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("link", "add", "c0", "netns", tp.cli.name, "type", "veth", "peer", "name", "d0", "netns", tp.dir.name)
	ip("link", "add", "d1", "netns", tp.dir.name, "type", "veth", "peer", "name", "r0", "netns", tp.rs.name)
	for _, c := range [][]string{
		{"-n", tp.cli.name, "addr", "add", "203.0.113.5/24", "dev", "c0"},
		{"-n", tp.dir.name, "addr", "add", "203.0.113.1/24", "dev", "d0"},
		{"-n", tp.dir.name, "addr", "add", "10.99.0.1/24", "dev", "d1"},
		{"-n", tp.dir.name, "addr", "add", "10.99.0.100/32", "dev", "d1"},
		{"-n", tp.dir.name, "addr", "add", "10.99.0.101/32", "dev", "d1"},
		{"-n", tp.rs.name, "addr", "add", "10.99.0.2/24", "dev", "r0"},
		{"-n", tp.rs.name, "addr", "add", "198.51.100.9/32", "dev", "lo"},
		{"-n", tp.cli.name, "link", "set", "c0", "up"},
		{"-n", tp.dir.name, "link", "set", "d0", "up"},
		{"-n", tp.dir.name, "link", "set", "d1", "up"},
		{"-n", tp.rs.name, "link", "set", "r0", "up"},
		{"-n", tp.cli.name, "link", "set", "lo", "up"},
		{"-n", tp.dir.name, "link", "set", "lo", "up"},
		{"-n", tp.rs.name, "link", "set", "lo", "up"},
		{"-n", tp.cli.name, "route", "add", "198.51.100.0/24", "via", "203.0.113.1"},
		{"-n", tp.dir.name, "route", "add", "198.51.100.9/32", "via", "10.99.0.2"},
	} {
		ip(c...)
	}
	inNS(t, tp.dir, func() { setSysctls(t, ForwardingSysctls(true, false, "")) })
	return tp
}

// echoServer listens on the VIP in rs and echoes lines; peers gets the
// source address of each connection it accepts.
func (tp fullnatTopo) echoServer(t *testing.T, port uint16) (peers <-chan string) {
	t.Helper()
	var ln net.Listener
	inNS(t, tp.rs, func() {
		var err error
		if ln, err = net.Listen("tcp", fmt.Sprintf("198.51.100.9:%d", port)); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { ln.Close() })
	ch := make(chan string, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ch
}

// dial opens a connection from the client to the VIP's port.
func (tp fullnatTopo) dial(t *testing.T, port uint16) net.Conn {
	t.Helper()
	var c net.Conn
	inNS(t, tp.cli, func() {
		var err error
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("203.0.113.5")}}
		if c, err = d.Dial("tcp", fmt.Sprintf("198.51.100.9:%d", port)); err != nil {
			t.Fatalf("connecting to the VIP's port %d: %v", port, err)
		}
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// echo sends a line over c and checks that it comes back.
func echo(t *testing.T, c net.Conn, line string) {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("sending %q: %v", line, err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q, %v", line, got, err)
	}
}

func wantPeer(t *testing.T, peers <-chan string, want string) {
	t.Helper()
	select {
	case p := <-peers:
		if p != want {
			t.Errorf("real server sees peer %s, want the SNAT address %s", p, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("real server accepted nothing")
	}
}

var ctMarkRE = regexp.MustCompile(`\bmark=(\d+)`)

// ctMarks returns the ct marks of the director's conntrack entries of
// connections to the VIP's port.
func (tp fullnatTopo) ctMarks(t *testing.T, port uint16) []uint32 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", tp.dir.name, "conntrack", "-L", "-p", "tcp",
		"--orig-dst", "198.51.100.9", "--orig-port-dst", strconv.Itoa(int(port))).CombinedOutput()
	if err != nil {
		t.Fatalf("conntrack -L: %v\n%s", err, out)
	}
	var marks []uint32
	for _, m := range ctMarkRE.FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.ParseUint(m[1], 10, 32)
		marks = append(marks, uint32(v))
	}
	return marks
}

// manyServices are n FULLNAT services on the VIP's ports 10000 and up,
// each with its own ct mark, SNAT to 10.99.0.100 except the last one,
// which goes to 10.99.0.101: it sorts last among the map elements, the
// ct marks and the SNAT ranges.
func manyServices(n int, proto l4.Protocol) Spec {
	var spec Spec
	for i := range n {
		to := "10.99.0.100"
		if i == n-1 {
			to = "10.99.0.101"
		}
		spec.SNAT = append(spec.SNAT, SNATRule{
			Match:  Match{VIP: addr("198.51.100.9"), Protocol: proto, Ports: []l4.PortRange{port(uint16(10000 + i))}},
			CtMark: manyMark(i), To: addrs(to), Comment: fmt.Sprintf("svc%05d", i),
		})
	}
	return spec
}

func manyMark(i int) uint32 { return 0x10000000 + uint32(i) }

// TestKernelDataPathTenThousandFullNAT loads 10,000 FULLNAT services and
// sends a real connection to the last one: the map lookups give it the
// service's ct mark and SNAT range, as the rule per service did.
func TestKernelDataPathTenThousandFullNAT(t *testing.T) {
	requireNetAdmin(t)
	const n = 10000
	tp := newFullNATTopo(t)
	rs := mustRender(t, manyServices(n, l4.TCP))
	start := time.Now()
	if err := NewKernel(InNetNS(tp.dir.fd)).Apply(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	t.Logf("applied %d FULLNAT services in %v", n, time.Since(start).Round(time.Millisecond))
	listed := tp.dir.lvsdTables(t)
	if listed != rs.String() {
		t.Errorf("nft lists the 10,000 services differently from Ruleset.String()")
	}
	last, lastMark := uint16(10000+n-1), manyMark(n-1)
	for _, want := range []string{
		fmt.Sprintf("198.51.100.9 . tcp . %d : 0x%08x", last, lastMark),
		fmt.Sprintf("0x%08x : goto snat_1 }", lastMark),
		"ct mark set ip daddr . meta l4proto . th dport map @" + rules.MapFullNATPorts + " return",
		"ct mark vmap @" + rules.MapSNAT,
		"snat to 10.99.0.101 persistent",
	} {
		if !strings.Contains(listed, want) {
			t.Errorf("nft list lacks %q", want)
		}
	}
	peers := tp.echoServer(t, last)
	echo(t, tp.dial(t, last), "to the last service")
	wantPeer(t, peers, "10.99.0.101")
	if marks := tp.ctMarks(t, last); len(marks) != 1 || marks[0] != lastMark {
		t.Errorf("ct marks of the connection: %#x, want [%#x]", marks, lastMark)
	}
	// And the first one, through the other SNAT chain.
	peers = tp.echoServer(t, 10000)
	echo(t, tp.dial(t, 10000), "to the first service")
	wantPeer(t, peers, "10.99.0.100")
	if marks := tp.ctMarks(t, 10000); len(marks) != 1 || marks[0] != manyMark(0) {
		t.Errorf("ct marks of the connection: %#x, want [%#x]", marks, manyMark(0))
	}
}

// ruleLayout is the FULLNAT part of spec as lvsd wrote it before its maps:
// one fullnat rule per service and one postrouting rule per ct mark (only
// single ports of TCP or UDP, one SNAT address: what manyServices makes).
func ruleLayout(spec Spec) string {
	var b strings.Builder
	b.WriteString("table ip lvsd {\n\tset vips {\n\t\ttype ipv4_addr\n\t\tcomment \"managed by lvsd, ruleset 00000000000000000000000000000000\"\n")
	b.WriteString("\t\telements = { 198.51.100.9 }\n\t}\n\tchain prerouting {\n\t\ttype filter hook prerouting priority mangle; policy accept;\n")
	b.WriteString("\t\tip daddr != @vips accept\n\t\tjump fullnat\n\t}\n\tchain fullnat {\n")
	for _, r := range spec.SNAT {
		fmt.Fprintf(&b, "\t\tip daddr %s %s dport %d ct mark set 0x%08x return comment %q\n", r.VIP, r.Protocol, r.Ports[0].From, r.CtMark, r.Comment)
	}
	b.WriteString("\t}\n\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
	for _, r := range spec.SNAT {
		fmt.Fprintf(&b, "\t\tct mark 0x%08x snat to %s persistent comment %q\n", r.CtMark, r.To[0], r.Comment)
	}
	b.WriteString("\t}\n}\ntable ip6 lvsd {\n\tset vips {\n\t\ttype ipv6_addr\n\t\tcomment \"managed by lvsd, ruleset 00000000000000000000000000000000\"\n\t}\n}\n")
	return b.String()
}

// TestKernelUpgradeFromRuleLayout is a rolling upgrade: the tables of an
// older lvsd (a rule per FULLNAT service) carry connections when the new
// one applies the same services. The first Apply replaces them in one
// batch (the digest differs); the established connections keep their SNAT
// (conntrack holds it) and their ct marks, which are the services' own in
// both layouts; new connections get the same marks.
func TestKernelUpgradeFromRuleLayout(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	tp := newFullNATTopo(t)
	spec := manyServices(50, l4.TCP)
	tp.dir.nftStdin(t, ruleLayout(spec))
	k := NewKernel(InNetNS(tp.dir.fd))
	if d, err := k.Installed(ctx); err != nil || d == "" {
		t.Fatalf("Installed() on the older layout = %q, %v; want its digest", d, err)
	}

	first, last := uint16(10000), uint16(10049)
	oldConns := map[uint16]net.Conn{}
	peers := map[uint16]<-chan string{}
	for _, p := range []uint16{first, last} {
		peers[p] = tp.echoServer(t, p)
		oldConns[p] = tp.dial(t, p)
		echo(t, oldConns[p], "before the upgrade")
		want := "10.99.0.100"
		if p == last {
			want = "10.99.0.101"
		}
		wantPeer(t, peers[p], want)
	}
	before := map[uint16][]uint32{first: tp.ctMarks(t, first), last: tp.ctMarks(t, last)}

	rs := mustRender(t, spec)
	if err := k.Apply(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if got := tp.dir.lvsdTables(t); got != rs.String() {
		t.Fatalf("after the upgrade nft lists:\n%s--- want\n%s", got, rs)
	}
	if d, err := k.Installed(ctx); err != nil || d != rs.Digest() {
		t.Fatalf("Installed() = %q, %v; want %q", d, err, rs.Digest())
	}
	for _, p := range []uint16{first, last} {
		echo(t, oldConns[p], "after the upgrade")
		if after := tp.ctMarks(t, p); fmt.Sprint(after) != fmt.Sprint(before[p]) || len(after) != 1 {
			t.Errorf("port %d: ct marks %#x before the upgrade, %#x after", p, before[p], after)
		}
	}
	want := map[uint16]uint32{first: manyMark(0), last: manyMark(49)}
	for p, mark := range want {
		if got := before[p]; len(got) != 1 || got[0] != mark {
			t.Errorf("port %d: ct marks %#x under the older layout, want [%#x]", p, got, mark)
		}
	}
	// A new connection to the last service: the same mark and SNAT as before.
	echo(t, tp.dial(t, last), "a new connection")
	wantPeer(t, peers[last], "10.99.0.101")
	marks := tp.ctMarks(t, last)
	if len(marks) != 2 || marks[0] != want[last] || marks[1] != want[last] {
		t.Errorf("ct marks of the old and the new connection to port %d: %#x, want two of %#x", last, marks, want[last])
	}
}
