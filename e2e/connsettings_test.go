//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// TestTimeoutsAndThresholds (issue 17, item 4) checks the kernel connection
// settings with real traffic: the IPVS timeouts the agent file names (and
// only those), a backend's upper and lower connection thresholds, and the
// sorry server.
func TestTimeoutsAndThresholds(t *testing.T) {
	t.Run("timeouts", testIdleTimeout)
	t.Run("thresholds", testThresholds)
	t.Run("sorry server", testSorryServer)
}

// withIPVS adds an ipvs block to the director's agent file.
func (l *lvsd) withIPVS(block string) {
	l.t.Helper()
	f, err := os.OpenFile(filepath.Join(l.dir, "lvsd.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "ipvs: %s\n", block); err != nil {
		l.t.Fatal(err)
	}
}

// webService is a DR service on port 80 of vip with extra keys and backends
// (YAML list items).
func webService(vip netip.Addr, extra, backends string) string {
	return fmt.Sprintf("service: web\nvip: %s\nports: [80]\n%sbackends:\n%s", vip, extra, backends)
}

// connEntry returns the director's IPVS connection entry of the client
// connection c (ok false when there is none).
func connEntry(t *testing.T, k *ipvs.Kernel, c *echo.Conn) (ipvs.Connection, bool) {
	t.Helper()
	conns, err := k.Connections(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddrPort(c.LocalAddr().String())
	for _, e := range conns {
		if e.Protocol == l4.TCP && e.Client == client {
			return e, true
		}
	}
	return ipvs.Connection{}, false
}

// testIdleTimeout: lvsd sets the timeouts it is given and no other (udp,
// set by someone else, stays); `lvsd plan` and the log say what they were;
// an idle connection's entry lives tcp (3 s) after its last packet, not
// after its first, and the client's next packet is then refused.
func testIdleTimeout(t *testing.T) {
	tp := topo.New(t)
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	dir := tp.Director(1)
	run(t, dir, "modprobe", "ip_vs")
	run(t, dir, "ipvsadm", "--set", "0", "0", "77") // another user's udp timeout
	d := newDirector(t, dir, map[string]string{"web": webService(vip, "", backendsYAML([]*topo.Host{rs1, rs2}))})
	d.withIPVS("{timeouts: {tcp: 3s, tcp_fin: 2s}}")

	const wantOp = "set-ipvs-timeouts tcp=3s tcp_fin=2s (was tcp=15m0s tcp_fin=2m0s)"
	if out, code := runLVSD(t, dir, "plan", "--config", filepath.Join(d.dir, "lvsd.yaml")); code != 0 || !strings.Contains(out, wantOp) {
		t.Errorf("lvsd plan (exit %d) does not show %q:\n%s", code, wantOp, out)
	}
	d.start()
	d.waitServices(1, 2)
	if got := run(t, dir, "ipvsadm", "-L", "--timeout"); !strings.Contains(got, "Timeout (tcp tcpfin udp): 3 2 77") {
		t.Errorf("ipvsadm -L --timeout: %q, want tcp 3, tcpfin 2 and the udp 77 left alone", got)
	}
	if !strings.Contains(d.log(), wantOp) {
		t.Errorf("the log does not say %q", wantOp)
	}

	k := d.ipvs()
	c, err := echo.Connect(context.Background(), tp.Client(), netip.Addr{}, netip.AddrPortFrom(vip, 80))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	time.Sleep(2 * time.Second)
	if err := c.Echo(context.Background(), "one more packet"); err != nil { // the entry's clock starts again
		t.Fatal(err)
	}
	last := time.Now()
	e, ok := connEntry(t, k, c)
	if !ok || e.State != "ESTABLISHED" || e.Expires > 3*time.Second {
		t.Fatalf("entry of the connection: %+v (present %v), want ESTABLISHED expiring within 3s", e, ok)
	}
	time.Sleep(2 * time.Second) // 4 s after the first packets, 2 s after the last
	if _, ok := connEntry(t, k, c); !ok {
		t.Fatalf("the entry went %v after the last packet: the timeout counts from the last packet, 3s", time.Since(last))
	}
	waitFor(t, 5*time.Second, "the idle connection's entry to expire", func() bool {
		_, ok := connEntry(t, k, c)
		return !ok
	})
	gone := time.Since(last)
	t.Logf("the idle connection's entry expired %v after its last packet (tcp timeout 3s, polled every 100 ms)", gone.Round(10*time.Millisecond))
	if gone < 3*time.Second {
		t.Errorf("the entry expired %v after the last packet, before the 3s timeout", gone)
	}
	if err := c.Echo(context.Background(), "after the timeout"); err == nil {
		t.Error("the connection still works after its entry expired: the director forwarded a packet it had no entry for")
	}
}

// destination reads one destination's counters from the kernel.
func destination(t *testing.T, k *ipvs.Kernel, svc ipvs.ServiceKey, addr netip.Addr) ipvs.Destination {
	t.Helper()
	dsts, err := k.Destinations(context.Background(), svc)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dsts {
		if d.Addr == addr {
			return d
		}
	}
	t.Fatalf("%s is not a destination of %s", addr, svc)
	return ipvs.Destination{}
}

// openConns opens n connections through dst from the client's sources in
// turn and returns them, by the server that greeted each.
func openConns(t *testing.T, tp *topo.Topology, dst netip.AddrPort, n int) map[string][]*echo.Conn {
	t.Helper()
	out := map[string][]*echo.Conn{}
	sources := tp.ClientSources(false)
	for i := range n {
		c, err := echo.Connect(context.Background(), tp.Client(), sources[i%len(sources)], dst)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		out[c.Hello.Name] = append(out[c.Hello.Name], c)
	}
	return out
}

func countConns(m map[string][]*echo.Conn) string {
	return fmt.Sprintf("rs1 %d, rs2 %d", len(m["rs1"]), len(m["rs2"]))
}

// testThresholds: rs1 has upper_threshold 2 and lower_threshold 1. With two
// connections open it takes no third (the others go to rs2), a closed one
// still counts while its entry lives (inactive), it stays out while it has
// one (1 is not below 1), and takes new connections again once it has none.
func testThresholds(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(8))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	d := newDirector(t, tp.Director(1), map[string]string{"web": webService(vip, "",
		fmt.Sprintf("  - {address: %s, upper_threshold: 2, lower_threshold: 1}\n  - {address: %s}\n", rs1.V4, rs2.V4))})
	d.withIPVS("{timeouts: {tcp_fin: 4s}}") // a closed connection's entry (FIN_WAIT under DR) lives 4 s
	d.start()
	d.waitServices(1, 2)
	k := d.ipvs()
	svc := ipvs.ServiceKey{Protocol: l4.TCP, Addr: vip, Port: 80}
	if r := destination(t, k, svc, rs1.V4); r.UpperThreshold != 2 || r.LowerThreshold != 1 {
		t.Fatalf("rs1's thresholds in the kernel: upper %d lower %d, want 2 and 1", r.UpperThreshold, r.LowerThreshold)
	}
	dst := netip.AddrPortFrom(vip, 80)
	rs1Counts := func() string {
		r := destination(t, k, svc, rs1.V4)
		return fmt.Sprintf("active %d, inactive %d", r.ActiveConns, r.InactiveConns)
	}

	// Open connections until two reached rs1 (mh spreads them by source port).
	held := map[string][]*echo.Conn{}
	for i := 0; len(held["rs1"]) < 2; i++ {
		if i == 40 {
			t.Fatalf("40 connections and not two on rs1: %s", countConns(held))
		}
		for name, cs := range openConns(t, tp, dst, 1) {
			held[name] = append(held[name], cs...)
		}
	}
	if more := openConns(t, tp, dst, 12); len(more["rs1"]) != 0 || len(more["rs2"]) != 12 {
		t.Errorf("rs1 at its upper threshold (2 open), 12 new connections went %s; want all on rs2", countConns(more))
	}
	t.Logf("rs1 with 2 open connections: %s", rs1Counts())

	held["rs1"][0].Close()
	waitFor(t, 3*time.Second, "the closed connection's entry to turn inactive", func() bool { return rs1Counts() == "active 1, inactive 1" })
	if more := openConns(t, tp, dst, 6); len(more["rs1"]) != 0 {
		t.Errorf("rs1 with 2 entries (1 open, 1 closed) took %d of 6 new connections", len(more["rs1"]))
	}
	waitFor(t, 8*time.Second, "the closed connection's entry to expire", func() bool { return rs1Counts() == "active 1, inactive 0" })
	if more := openConns(t, tp, dst, 12); len(more["rs1"]) != 0 {
		t.Errorf("rs1 down to 1 connection (lower threshold 1: it must drop below 1) took %d of 12 new ones", len(more["rs1"]))
	}

	held["rs1"][1].Close()
	waitFor(t, 8*time.Second, "rs1's last entry to expire", func() bool { return rs1Counts() == "active 0, inactive 0" })
	back := openConns(t, tp, dst, 12)
	if len(back["rs1"]) == 0 {
		t.Errorf("rs1 without connections took none of 12 new ones: %s", countConns(back))
	}
	t.Logf("rs1 empty again: 12 new connections went %s", countConns(back))
	for _, c := range back["rs1"] {
		c.Close()
	}
	waitFor(t, 8*time.Second, "rs1 empty", func() bool { return rs1Counts() == "active 0, inactive 0" })

	// What the kernel counts: a connection closed on rs1 whose entry still
	// lives (inactive) and a new one reach upper_threshold 2 together.
	onRS1(t, tp, dst).Close()
	waitFor(t, 3*time.Second, "rs1's one connection to turn inactive", func() bool { return rs1Counts() == "active 0, inactive 1" })
	onRS1(t, tp, dst)
	if counts := rs1Counts(); counts != "active 1, inactive 1" {
		t.Fatalf("rs1 at %s, want active 1, inactive 1: the closed connection's entry expired too soon (tcp_fin 4s)", counts)
	}
	if more := openConns(t, tp, dst, 12); len(more["rs1"]) != 0 {
		t.Errorf("rs1 with 1 active and 1 inactive entry (upper 2) took %d of 12 new connections: inactive entries do not count", len(more["rs1"]))
	} else {
		t.Log("1 active + 1 inactive (closed, not yet expired) entry reached upper_threshold 2: the kernel counts both")
	}
}

// onRS1 opens connections through dst until one reaches rs1 and returns it.
func onRS1(t *testing.T, tp *topo.Topology, dst netip.AddrPort) *echo.Conn {
	t.Helper()
	for range 20 {
		if cs := openConns(t, tp, dst, 1)["rs1"]; len(cs) > 0 {
			return cs[0]
		}
	}
	t.Fatal("20 connections and none on rs1")
	return nil
}

// testSorryServer: rs3 is the sorry server of rs1 and rs2. It is not in the
// kernel while a backend is healthy, takes every new connection while none
// is, and once rs1 recovers takes no new one: its established connection
// goes on at weight 0 and, once closed and expired, it leaves the kernel.
func testSorryServer(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(24), topo.WithRealServers(3))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2, rs3 := tp.RS(1), tp.RS(2), tp.RS(3)
	holdVIPOnLoopback(t, vip, rs1, rs2, rs3)
	servers := serveEcho(t, echo.Config{TCP: []uint16{80}, HTTP: []uint16{8080}}, rs1, rs2, rs3)
	extra := fmt.Sprintf("sorry_server: %s\nhealth:\n  interval: %s\n  timeout: 250ms\n  rise: 1\n  fall: 1\n  checks: [{type: http, port: 8080, path: /healthz}]\n",
		rs3.V4, healthInterval)
	d := newDirector(t, tp.Director(1), map[string]string{"web": webService(vip, extra, backendsYAML([]*topo.Host{rs1, rs2}))})
	d.withIPVS("{timeouts: {tcp_fin: 2s}}")
	d.start()
	d.waitServices(1, 2)
	director := tp.Director(1)

	if dist := newConnectionsGoTo(t, tp, vip, 24); dist["rs3"] != 0 || dist["error"] != 0 {
		t.Errorf("backends healthy, new connections went %s; want none on the sorry server", formatDistribution(dist))
	}
	servers["rs1"].SetHealthy(false)
	servers["rs2"].SetHealthy(false)
	took := waitFor(t, 10*time.Second, "new connections on the sorry server", func() bool {
		return newConnectionsGoTo(t, tp, vip, 24)["rs3"] == 24
	})
	t.Logf("every new connection on the sorry server %v after both backends' checks failed", took.Round(10*time.Millisecond))
	if save := ipvsSave(t, director); !strings.Contains(save, fmt.Sprintf("-r %s:80 -g -w 1", rs3.V4)) {
		t.Errorf("sorry server not at weight 1:\n%s", save)
	}
	conn := connectTo(t, tp, netip.AddrPortFrom(vip, 80), "rs3")

	servers["rs1"].SetHealthy(true)
	took = waitFor(t, 10*time.Second, "new connections off the sorry server", func() bool {
		return newConnectionsGoTo(t, tp, vip, 24)["rs3"] == 0
	})
	t.Logf("no new connection on the sorry server %v after rs1 recovered", took.Round(10*time.Millisecond))
	if dist := newConnectionsGoTo(t, tp, vip, 24); dist["rs1"] != 24 {
		t.Errorf("rs1 healthy, rs2 not: new connections went %s; want all on rs1", formatDistribution(dist))
	}
	if save := ipvsSave(t, director); !strings.Contains(save, fmt.Sprintf("-r %s:80 -g -w 0", rs3.V4)) {
		t.Errorf("the sorry server is not draining at weight 0:\n%s", save)
	}
	if err := conn.Echo(context.Background(), "still on the sorry server"); err != nil {
		t.Errorf("the connection on the sorry server broke when a backend recovered: %v", err)
	}
	conn.Close()
	waitFor(t, 20*time.Second, "the drained sorry server to leave the kernel", func() bool {
		return !strings.Contains(ipvsSave(t, director), rs3.V4.String()+":80")
	})
}
