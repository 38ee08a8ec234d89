package topo_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/vishvananda/netlink"
)

// peerServer accepts TCP connections on h (dual stack) and writes back the
// peer address each one came from.
func peerServer(t *testing.T, h *topo.Host, port int) {
	t.Helper()
	lineServer(t, h, port, func(c net.Conn) string {
		return c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String()
	})
}

// lineServer accepts TCP connections on h (dual stack) and writes one line,
// reply's, to each.
func lineServer(t *testing.T, h *topo.Host, port int, reply func(net.Conn) string) {
	t.Helper()
	ln, err := h.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\n", reply(c))
			c.Close()
		}
	}()
}

func askPeer(ctx context.Context, h *topo.Host, src netip.Addr, dst netip.AddrPort) (string, error) {
	c, err := h.Dial(ctx, "tcp", src, dst)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func TestReachFromManySources(t *testing.T) {
	start := time.Now()
	tp := topo.New(t)
	t.Logf("default topology (4 hosts, 2×32 sources) in %v", time.Since(start))
	rs1 := tp.RS(1)
	peerServer(t, rs1, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, v6 := range []bool{false, true} {
		srcs := append([]netip.Addr{tp.Client().Addr(v6)}, tp.ClientSources(v6)...)
		if len(srcs) != 33 {
			t.Fatalf("got %d sources", len(srcs))
		}
		dst := netip.AddrPortFrom(rs1.Addr(v6), 7)
		var wg sync.WaitGroup
		for _, src := range srcs {
			wg.Add(1)
			go func() { // parallel Dials: Host must be safe for that
				defer wg.Done()
				got, err := askPeer(ctx, tp.Client(), src, dst)
				if err != nil || got != src.String() {
					t.Errorf("%s -> %s: peer %q, %v", src, dst, got, err)
				}
			}()
		}
		wg.Wait()
	}
}

func TestUDP(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(2))
	pc, err := tp.RS(2).ListenPacket("udp", ":5353")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(from.(*net.UDPAddr).AddrPort().Addr().Unmap().String()+" "+string(buf[:n])), from)
		}
	}()
	ctx := context.Background()
	for _, v6 := range []bool{false, true} {
		src := tp.ClientSources(v6)[1]
		c, err := tp.Client().Dial(ctx, "udp", src, netip.AddrPortFrom(tp.RS(2).Addr(v6), 5353))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("hi"))
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		c.Close()
		if want := src.String() + " hi"; err != nil || string(buf[:n]) != want {
			t.Errorf("udp from %s: %q %v, want %q", src, buf[:n], err, want)
		}
	}
}

func TestSysctlOnlyInTarget(t *testing.T) {
	tp := topo.New(t)
	const key = "net/ipv4/conf/all/arp_ignore"
	before, err := (*topo.Host)(nil).ReadSysctl(key)
	if err != nil {
		t.Fatal(err)
	}
	// Dotted form on write, slash form on read.
	if err := tp.RS(1).Sysctl("net.ipv4.conf.all.arp_ignore", "1"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*topo.Host{tp.RS(1), tp.RS(2), tp.Client(), tp.Director(1), nil} {
		want := "0"
		switch h {
		case tp.RS(1):
			want = "1"
		case nil:
			want = before
		}
		if got, err := h.ReadSysctl(key); err != nil || got != want {
			t.Errorf("%v: %s = %q (%v), want %q", h, key, got, err, want)
		}
	}
	// DAD is off in every host, and the address is usable at once.
	if got, _ := tp.Client().ReadSysctl("net/ipv6/conf/eth0/accept_dad"); got != "0" {
		t.Errorf("eth0 accept_dad = %q", got)
	}
	out, err := tp.Client().Run(context.Background(), "ip", "-6", "-o", "addr", "show", "tentative")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("tentative addresses: %q %v", out, err)
	}
}

// TestThreadsStayHome checks the thread discipline: after many Do calls
// (including one that panics), no unlocked thread is left in a host netns.
func TestThreadsStayHome(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(0))
	self := func() string {
		s, err := os.Readlink("/proc/thread-self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	home := self()
	var inHost string
	if err := tp.RS(1).Do(func() error { inHost = self(); return nil }); err != nil || inHost == home {
		t.Fatalf("Do did not switch: %q vs %q (%v)", inHost, home, err)
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		tp.RS(1).Do(func() error { panic("boom") })
	}()
	if err := tp.RS(1).Do(func() error { return errors.New("e") }); err == nil || err.Error() != "e" {
		t.Errorf("error not passed through: %v", err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); tp.RS(1 + i%2).Do(func() error { return nil }) }()
		go func() {
			defer wg.Done()
			if s := self(); s != home {
				t.Errorf("goroutine on a thread in %s, want %s", s, home)
			}
		}()
	}
	wg.Wait()
}

func TestExecAndRun(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(0))
	ctx := context.Background()
	out, err := tp.RS(2).Run(ctx, "ip", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, "10.0.0.12/24") || !strings.Contains(out, "fd00::12/64") {
		t.Errorf("Run: %q %v", out, err)
	}
	b, err := tp.Director(1).Exec(ctx, "ip", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "10.0.0.2/24") {
		t.Errorf("Exec: %q %v", b, err)
	}
	if _, err := tp.RS(1).Run(ctx, "false"); err == nil || !strings.Contains(err.Error(), "rs1") {
		t.Errorf("Run false: %v", err)
	}
}

func TestRoutesAndPort(t *testing.T) {
	gw4, gw6 := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")
	tp := topo.New(t, topo.WithClientSources(1), topo.WithRealServers(3), topo.WithDirectors(2),
		topo.WithDefaultGateway(gw4, gw6))
	ctx := context.Background()
	if tp.RS(3).V4 != netip.MustParseAddr("10.0.0.13") || tp.Director(2).V6 != netip.MustParseAddr("fd00::3") {
		t.Errorf("address plan: rs3 %s director2 %s", tp.RS(3).V4, tp.Director(2).V6)
	}
	for _, h := range tp.Hosts() {
		gws := defaultGateways(t, h)
		want := []string{"10.0.0.2", "fd00::2"}
		if h.ID == "director" {
			want = nil
		}
		if strings.Join(gws, " ") != strings.Join(want, " ") {
			t.Errorf("%v default routes via %v, want %v", h, gws, want)
		}
	}
	if err := tp.RS(1).SetDefaultRoute(netip.MustParseAddr("10.0.0.3")); err != nil {
		t.Fatal(err)
	}
	if gws := defaultGateways(t, tp.RS(1)); len(gws) != 2 || gws[0] != "10.0.0.3" {
		t.Errorf("replaced default route: %v", gws)
	}

	peerServer(t, tp.RS(1), 7)
	dst := netip.AddrPortFrom(tp.RS(1).V4, 7)
	if err := tp.RS(1).SetPort(false); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := askPeer(short, tp.Client(), netip.Addr{}, dst); err == nil {
		t.Error("reached rs1 with its port down")
	}
	cancel()
	if err := tp.RS(1).SetPort(true); err != nil {
		t.Fatal(err)
	}
	// The client's failed ARP entry would otherwise delay the next try to
	// its next probe (up to 1 s).
	if _, err := tp.Client().Run(ctx, "ip", "neigh", "flush", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if got, err := askPeer(ctx, tp.Client(), netip.Addr{}, dst); err != nil || got != "10.0.0.1" {
		t.Errorf("after port up: %q %v", got, err)
	}
}

// defaultGateways lists the gateways of h's default routes, v4 first.
// netlink's package functions open their socket on the calling thread, so
// inside Do they see the host's namespace (no exec: cheap under TCG).
func defaultGateways(t *testing.T, h *topo.Host) []string {
	var gws []string
	err := h.Do(func() error {
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			routes, err := netlink.RouteList(nil, fam)
			if err != nil {
				return err
			}
			for _, r := range routes {
				if r.Dst == nil || r.Dst.IP.IsUnspecified() {
					gws = append(gws, r.Gw.String())
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return gws
}

// TestManySources covers sources beyond the /24 (held by local routes).
func TestManySources(t *testing.T) {
	start := time.Now()
	tp := topo.New(t, topo.WithClientSources(400))
	t.Logf("topology with 2×400 sources in %v", time.Since(start))
	peerServer(t, tp.RS(1), 7)
	ctx := context.Background()
	for _, v6 := range []bool{false, true} {
		srcs := tp.ClientSources(v6)
		for _, src := range []netip.Addr{srcs[0], srcs[154], srcs[155], srcs[300], srcs[399]} {
			got, err := askPeer(ctx, tp.Client(), src, netip.AddrPortFrom(tp.RS(1).Addr(v6), 7))
			if err != nil || got != src.String() {
				t.Errorf("%s: %q %v", src, got, err)
			}
		}
	}
	if s := tp.ClientSources(false); s[155] != netip.MustParseAddr("10.1.0.1") || s[154] != netip.MustParseAddr("10.0.0.254") ||
		s[399] != netip.MustParseAddr("10.1.0.245") {
		t.Errorf("v4 sources: %s %s %s", s[154], s[155], s[399])
	}
	if s := tp.ClientSources(true); s[155] != netip.MustParseAddr("fd01::1") || s[154] != netip.MustParseAddr("fd00::254") ||
		s[399] != netip.MustParseAddr("fd01::245") {
		t.Errorf("v6 sources: %s %s %s", s[154], s[155], s[399])
	}
}

// leftovers lists this topology's namespaces and links that still exist.
func leftovers(t *testing.T, prefix string) []string {
	var out []string
	names, _ := filepath.Glob("/run/netns/" + prefix + "-*")
	out = append(out, names...)
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if n := l.Attrs().Name; n == prefix || strings.HasPrefix(n, prefix+"-") {
			out = append(out, n)
		}
	}
	return out
}

func TestCleanup(t *testing.T) {
	var prefix string
	var start time.Time
	var pin net.Listener
	t.Run("inner", func(t *testing.T) {
		tp := topo.New(t)
		prefix = tp.Prefix
		if got := leftovers(t, prefix); len(got) != 1+4+4 { // bridge, 4 netns, 4 ports
			t.Errorf("before cleanup: %v", got)
		}
		// A socket left open pins the namespace; cleanup must still remove
		// the name and the links.
		var err error
		if pin, err = tp.RS(1).Listen("tcp", ":9"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { start = time.Now() }) // runs first: cleanups are LIFO
	})
	t.Logf("cleanup of the default topology in %v", time.Since(start))
	defer pin.Close()
	if got := leftovers(t, prefix); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}
	out, err := (*topo.Host)(nil).Run(context.Background(), "ip", "netns", "list")
	if err != nil || strings.Contains(out, prefix+"-") {
		t.Errorf("ip netns list: %q %v", out, err)
	}
}

// failingTB makes New fail half-way (Fatalf is recorded and stops the
// goroutine) to check that what was made so far is removed.
type failingTB struct {
	testing.TB
	cleanups []func()
	failed   bool
}

func (f *failingTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *failingTB) Errorf(format string, args ...any) {
	f.failed = true
	f.TB.Logf(format, args...)
}
func (f *failingTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

func TestCleanupAfterFailure(t *testing.T) {
	// A second topology whose directors collide with nothing but whose
	// extra host fails: AddHost with a duplicate id after New.
	f := &failingTB{TB: t}
	done := make(chan *topo.Topology, 1)
	go func() {
		defer close(done)
		tp := topo.New(f, topo.WithClientSources(0))
		done <- tp
		if _, err := tp.AddHost("rs1"); err == nil {
			f.Fatalf("duplicate AddHost succeeded")
		}
		if _, err := tp.AddHost("bad name"); err == nil {
			f.Fatalf("bad name accepted")
		}
		// Break a host half-way: an address that cannot be added.
		if _, err := tp.AddHost("odd", netip.MustParsePrefix("10.0.0.200/24"), netip.MustParsePrefix("10.0.0.200/24")); err == nil {
			f.Fatalf("duplicate address accepted")
		}
		f.Fatalf("test failed on purpose")
	}()
	tp := <-done
	<-done
	if !f.failed || tp == nil {
		t.Fatal("setup did not fail as planned")
	}
	if got := leftovers(t, tp.Prefix); len(got) != 1+5+5 {
		t.Errorf("before cleanup (bridge, 5 netns, 5 ports): %v", got)
	}
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	if got := leftovers(t, tp.Prefix); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}
}

// TestRouterSpreadsOverDirectors: WithRouter forwards the client's flows to
// a VIP over a multipath route (here static; FRR installs one in the ECMP
// tests) by the L4 hash, and the client learns no redirect that would
// send it to one director directly.
func TestRouterSpreadsOverDirectors(t *testing.T) {
	tp := topo.New(t, topo.WithRouter(), topo.WithDirectors(2), topo.WithRealServers(0), topo.WithClientSources(40))
	ctx := context.Background()
	vips := []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32"), netip.MustParsePrefix("2001:db8::10/128")}
	for _, d := range tp.Directors() {
		for _, v := range vips {
			if err := d.AddAddr(v, "lo"); err != nil {
				t.Fatal(err)
			}
		}
		idServer(t, d, 7)
	}
	for _, v := range vips {
		v6 := v.Addr().Is6()
		if _, err := tp.Router().Run(ctx, "ip", "route", "add", v.String(),
			"nexthop", "via", tp.Director(1).Addr(v6).String(), "nexthop", "via", tp.Director(2).Addr(v6).String()); err != nil {
			t.Fatal(err)
		}
	}
	if err := tp.RouteViaRouter(vips...); err != nil {
		t.Fatal(err)
	}
	for _, v := range vips {
		v6 := v.Addr().Is6()
		count := map[string]int{}
		for _, src := range tp.ClientSources(v6) {
			got, err := askPeer(ctx, tp.Client(), src, netip.AddrPortFrom(v.Addr(), 7))
			if err != nil {
				t.Fatalf("%s -> %s: %v", src, v.Addr(), err)
			}
			count[got]++
		}
		if count["director"] == 0 || count["director2"] == 0 {
			t.Errorf("%s: 40 flows went %v", v.Addr(), count)
		}
		out, err := tp.Client().Run(ctx, "ip", "route", "get", v.Addr().String())
		if err != nil || !strings.Contains(out, "via "+tp.Router().Addr(v6).String()) {
			t.Errorf("client's route to %s: %q %v (a redirect?)", v.Addr(), out, err)
		}
	}
}

// idServer answers every TCP connection on h with h's ID.
func idServer(t *testing.T, h *topo.Host, port int) {
	t.Helper()
	lineServer(t, h, port, func(net.Conn) string { return h.ID })
}

// A segment's hosts are reached through its router only: in both families
// the client and the director talk to a host of the segment, which sees
// their own addresses, and whose only neighbour is the router.
func TestSegment(t *testing.T) {
	tp := topo.New(t, topo.WithRealServers(0), topo.WithClientSources(2))
	router, err := tp.AddHost("router", netip.MustParsePrefix("10.0.0.254/24"), netip.MustParsePrefix("fd00::254/64"))
	if err != nil {
		t.Fatal(err)
	}
	seg, err := tp.AddSegment(router, netip.MustParsePrefix("10.0.2.254/24"), netip.MustParsePrefix("fd02::254/64"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := seg.AddHost("rs1", netip.MustParsePrefix("10.0.2.11/24"), netip.MustParsePrefix("fd02::11/64"))
	if err != nil {
		t.Fatal(err)
	}
	if tp.Host("rs1") != rs {
		t.Errorf("Host(rs1) does not find the segment's host")
	}
	peerServer(t, rs, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, from := range []*topo.Host{tp.Client(), tp.Director(1)} {
		for _, v6 := range []bool{false, true} {
			got, err := askPeer(ctx, from, from.Addr(v6), netip.AddrPortFrom(rs.Addr(v6), 7))
			if err != nil || got != from.Addr(v6).String() {
				t.Errorf("%v to %s: %q, %v; want its own address", from, rs.Addr(v6), got, err)
			}
		}
	}
	gw := routerMAC(t, router)
	var neighs []netlink.Neigh
	err = rs.Do(func() (err error) {
		neighs, err = netlink.NeighList(0, netlink.FAMILY_ALL)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range neighs {
		if mac := n.HardwareAddr.String(); mac != "" && mac != gw && !n.IP.IsMulticast() {
			t.Errorf("rs1 has a neighbour other than the router (%s): %s %s", gw, n.IP, mac)
		}
	}
}

// routerMAC is the MAC of the router's interface on the segment.
func routerMAC(t *testing.T, router *topo.Host) string {
	t.Helper()
	var mac string
	err := router.Do(func() error {
		l, err := netlink.LinkByName("eth1")
		if err == nil {
			mac = l.Attrs().HardwareAddr.String()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac
}
