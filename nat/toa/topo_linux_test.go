package toa

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The test's FULLNAT, emulated with nftables since this host has no IPVS:
// clients in one namespace reach the VIPs through a director namespace
// that DNATs them to the server and SNATs them to the director's source
// address, as IPVS's FULLNAT does.
var (
	vip4, vip6         = netip.MustParseAddr("10.77.100.1"), netip.MustParseAddr("fd77:100::1")
	server4, server6   = netip.MustParseAddr("10.78.0.2"), netip.MustParseAddr("fd78::2")
	snat4, snat6       = netip.MustParseAddr("10.78.0.1"), netip.MustParseAddr("fd78::1")
	clients4, clients6 = hosts("10.77.0.%d", 10, 5), hosts("fd77::%x", 0x10, 5)
)

const (
	port     = 8080 // the service on a socket of the VIP's family
	dualPort = 8081 // the IPv4 service on the server's dual-stack socket
)

func hosts(format string, first, n int) []netip.Addr {
	var out []netip.Addr
	for i := range n {
		out = append(out, netip.MustParseAddr(fmt.Sprintf(format, first+i)))
	}
	return out
}

// topo is the three namespaces: client, director (client-facing interface
// "dc"), server.
type topo struct {
	client, director, server string
}

func newTopo(t *testing.T) topo {
	t.Helper()
	id := fmt.Sprintf("%d-%d", os.Getpid()%100000, seq.Add(1))
	tp := topo{client: "toa-c-" + id, director: "toa-d-" + id, server: "toa-s-" + id}
	for _, ns := range []string{tp.client, tp.director, tp.server} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	ip := func(ns string, args ...string) { run(t, "ip", append([]string{"-n", ns}, args...)...) }
	run(t, "ip", "link", "add", "cd"+id, "netns", tp.client, "type", "veth", "peer", "name", "dc", "netns", tp.director)
	run(t, "ip", "link", "add", "ds"+id, "netns", tp.director, "type", "veth", "peer", "name", "sd", "netns", tp.server)
	ip(tp.client, "link", "set", "cd"+id, "name", "c0")
	ip(tp.director, "link", "set", "ds"+id, "name", "d1")
	for _, l := range [][2]string{{tp.client, "c0"}, {tp.client, "lo"}, {tp.director, "dc"}, {tp.director, "d1"}, {tp.director, "lo"}, {tp.server, "sd"}, {tp.server, "lo"}} {
		ip(l[0], "link", "set", l[1], "up")
	}
	for i := range clients4 {
		ip(tp.client, "addr", "add", clients4[i].String()+"/24", "dev", "c0")
		ip(tp.client, "addr", "add", clients6[i].String()+"/64", "dev", "c0", "nodad")
	}
	ip(tp.client, "route", "add", "default", "via", "10.77.0.1")
	ip(tp.client, "-6", "route", "add", "default", "via", "fd77::1")
	ip(tp.director, "addr", "add", "10.77.0.1/24", "dev", "dc")
	ip(tp.director, "addr", "add", "fd77::1/64", "dev", "dc", "nodad")
	ip(tp.director, "addr", "add", snat4.String()+"/24", "dev", "d1")
	ip(tp.director, "addr", "add", snat6.String()+"/64", "dev", "d1", "nodad")
	ip(tp.server, "addr", "add", server4.String()+"/24", "dev", "sd")
	ip(tp.server, "addr", "add", server6.String()+"/64", "dev", "sd", "nodad")
	ip(tp.server, "route", "add", "default", "via", snat4.String())
	ip(tp.server, "-6", "route", "add", "default", "via", snat6.String())
	run(t, "ip", "netns", "exec", tp.director, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	nft(t, tp.director, fmt.Sprintf(`
table ip fullnat {
	chain pre { type nat hook prerouting priority dstnat; ip daddr %[1]s tcp dport { %[5]d, %[6]d } dnat to %[2]s; }
	chain post { type nat hook postrouting priority srcnat; ip daddr %[2]s snat to %[3]s; }
}
table ip6 fullnat {
	chain pre { type nat hook prerouting priority dstnat; ip6 daddr %[4]s tcp dport %[5]d dnat to %[7]s; }
	chain post { type nat hook postrouting priority srcnat; ip6 daddr %[7]s snat to %[8]s; }
}`, vip4, server4, snat4, vip6, port, dualPort, server6, snat6))
	// The raw-socket client completes handshakes its kernel knows nothing of:
	// the kernel's resets must not reach the server.
	nft(t, tp.client, `table inet rawclient { chain out { type filter hook output priority 0; tcp flags & rst == rst drop; }; }`)
	return tp
}

func nft(t *testing.T, ns, script string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v\n%s\n%s", ns, err, out, script)
	}
}

// in runs fn on a thread in the namespace; sockets fn opens stay there.
func in(t *testing.T, ns string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Keep the thread locked: it dies with the goroutine instead of
			// serving others in the wrong namespace.
			t.Errorf("returning to the test's namespace: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	fn()
}

func nsHandle(t *testing.T, ns string) netns.NsHandle {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// report is what the test server saw of one connection.
type report struct {
	accept, peer, local netip.AddrPort
}

func parseReport(line string) (report, error) {
	var r report
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		ap, err := netip.ParseAddrPort(v)
		if err != nil {
			return r, fmt.Errorf("report %q: %v", line, err)
		}
		switch k {
		case "accept":
			r.accept = ap
		case "peer":
			r.peer = ap
		case "local":
			r.local = ap
		}
	}
	return r, nil
}

// testServer is the test binary run again as a server in the server's
// namespace and the cgroup, reporting each connection.
type testServer struct {
	lines chan string
	stop  func()
}

const serverEnv = "LVSD_TOA_TEST_SERVER"

func startServer(t *testing.T, tp topo, cgroupPath string) *testServer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("tcp4/%s,tcp6/%s,tcp/[::]:%d", netip.AddrPortFrom(server4, port), netip.AddrPortFrom(server6, port), dualPort)
	// The shell joins the cgroup before the server opens a socket: a
	// socket's cgroup is its creator's at creation.
	cmd := exec.Command("ip", "netns", "exec", tp.server, "sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$0"`, exe, cgroupPath)
	cmd.Env = append(os.Environ(), serverEnv+"="+listen)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &testServer{lines: make(chan string, 100)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				continue
			}
			s.lines <- sc.Text()
		}
	}()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
	}
	t.Cleanup(s.stop)
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the test server did not start")
	}
	return s
}

// next returns the server's report of the connection whose accepted port
// is sport (the SNAT keeps the client's port, and so does TOA).
func (s *testServer) next(t *testing.T, sport uint16) report {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case line := <-s.lines:
			r, err := parseReport(line)
			if err != nil {
				t.Fatal(err)
			}
			if r.accept.Port() == sport {
				return r
			}
		case <-timeout:
			t.Fatalf("no report from the server of a connection from port %d", sport)
		}
	}
}

// serve is the server's side of startServer: it listens where
// LVSD_TOA_TEST_SERVER says and writes, to each connection and to stdout,
// the peer addresses that accept() and getpeername() return.
func serve(spec string) int {
	var mu sync.Mutex
	for _, l := range strings.Split(spec, ",") {
		network, addr, _ := strings.Cut(l, "/")
		ln, err := net.Listen(network, addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				line := fmt.Sprintf("accept=%s peer=%s local=%s", unmapped(c.RemoteAddr()), peerName(c), unmapped(c.LocalAddr()))
				mu.Lock()
				fmt.Println(line)
				mu.Unlock()
				io.WriteString(c, line+"\n")
				c.Close()
			}
		}()
	}
	fmt.Println("ready")
	select {}
}

func unmapped(a net.Addr) netip.AddrPort {
	ap := a.(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// peerName asks getpeername(2) itself, which Go's RemoteAddr does not.
func peerName(c net.Conn) netip.AddrPort {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return netip.AddrPort{}
	}
	var sa unix.Sockaddr
	raw.Control(func(fd uintptr) { sa, err = unix.Getpeername(int(fd)) })
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// dial connects from src to the service and returns the server's report
// and the connection's own address.
func dial(t *testing.T, tp topo, src netip.Addr, dst netip.AddrPort) (report, netip.AddrPort) {
	t.Helper()
	var (
		c   net.Conn
		err error
	)
	in(t, tp.client, func() {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 5 * time.Second}
		c, err = d.DialContext(context.Background(), "tcp", dst.String())
	})
	if err != nil {
		t.Fatalf("dialing %s from %s: %v", dst, src, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the report from %s: %v", dst, err)
	}
	r, err := parseReport(line)
	if err != nil {
		t.Fatal(err)
	}
	return r, unmapped(c.LocalAddr())
}
