//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// healthBlock is the health check of the tests here: one failed round takes
// a backend out, one passed round brings it back.
func healthBlock() string {
	return fmt.Sprintf("health:\n  interval: %s\n  timeout: 250ms\n  rise: 1\n  fall: 1\n  checks: [{type: http, port: 8080, path: /healthz}]\n", healthInterval)
}

// udpFlow is one UDP flow: a connected socket keeps its source port, so
// IPVS keeps the flow on one backend while its entry lives.
type udpFlow struct{ net.Conn }

// ask sends one datagram and returns the name of the server that answered.
func (f udpFlow) ask() (string, error) {
	f.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := f.Write([]byte("ask\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := f.Read(buf)
	if err != nil {
		return "", err
	}
	r, err := echo.Parse(string(buf[:n]))
	return r.Name, err
}

// udpFlowTo opens flows from one client source after another until one
// lands on server.
func udpFlowTo(t *testing.T, tp *topo.Topology, dst netip.AddrPort, server string) udpFlow {
	t.Helper()
	for _, src := range tp.ClientSources(false) {
		c, err := tp.Client().Dial(context.Background(), "udp", src, dst)
		if err != nil {
			t.Fatal(err)
		}
		f := udpFlow{c}
		if name, err := f.ask(); err == nil && name == server {
			t.Cleanup(func() { c.Close() })
			return f
		}
		c.Close()
	}
	t.Fatalf("no UDP flow to %s reached %s", dst, server)
	return udpFlow{}
}

// TestUnhealthyPersistence: seed 000's connection persistence on unhealthy
// backends. rs1 fails its health check; on the TCP service with the default
// setting its established connection goes on; on the TCP service with
// `never` it is reset within a check interval or so; on the UDP service
// (default: UDP never persists) the same flow is answered by rs2 from then on.
func TestUnhealthyPersistence(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(24))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	servers := serveEcho(t, echo.Config{TCP: []uint16{80, 81}, UDP: []uint16{82}, HTTP: []uint16{8080}}, rs1, rs2)
	backends := "backends:\n" + backendsYAML([]*topo.Host{rs1, rs2})
	svc := func(name, extra string) string {
		return fmt.Sprintf("service: %s\nvip: %s\n%s%s%s", name, vip, extra, healthBlock(), backends)
	}
	d := newDirector(t, tp.Director(1), map[string]string{
		"keep":  svc("keep", "ports: [80]\n"),
		"never": svc("never", "ports: [81]\npersistence_on_unhealthy: never\n"),
		"udp":   svc("udp", "ports: [82]\nprotocol: udp\n"),
	})
	d.start()
	d.waitServices(3, 2)
	waitFor(t, 5*time.Second, "rs1's first health round", func() bool {
		return strings.Count(d.log(), "target=") >= 6 && !strings.Contains(d.log(), "healthy=false")
	})

	keep := connectTo(t, tp, netip.AddrPortFrom(vip, 80), "rs1")
	never := connectTo(t, tp, netip.AddrPortFrom(vip, 81), "rs1")
	flow := udpFlowTo(t, tp, netip.AddrPortFrom(vip, 82), "rs1")
	for i := range 3 { // the flow stays put while rs1 is healthy
		if name, err := flow.ask(); err != nil || name != "rs1" {
			t.Fatalf("UDP flow, datagram %d: %s %v, want rs1", i, name, err)
		}
	}

	off := d.logSize()
	start := time.Now()
	servers["rs1"].SetHealthy(false)
	d.waitLog(off, 10*time.Second, "event=reset", "service=never")
	var resetErr error
	waitFor(t, 10*time.Second, "the never-persist connection to rs1 reset", func() bool {
		resetErr = never.Echo(context.Background(), "are you there")
		return resetErr != nil
	})
	t.Logf("persistence_on_unhealthy never: the connection to rs1 failed %v after rs1's health endpoint failed (fall 1 × %v): %v",
		(time.Since(start)).Round(10*time.Millisecond), healthInterval, resetErr)
	if !strings.Contains(resetErr.Error(), "reset") {
		t.Errorf("the dropped connection failed with %v, want a reset (not a hang)", resetErr)
	}
	if err := keep.Echo(context.Background(), "default keeps me"); err != nil {
		t.Errorf("TCP, default-for-protocol: the established connection to rs1 broke: %v", err)
	}
	waitFor(t, 5*time.Second, "the UDP flow answered by rs2", func() bool {
		name, err := flow.ask()
		return err == nil && name == "rs2"
	})
	waitFor(t, 5*time.Second, "new connections all to rs2", func() bool {
		dist := newConnectionsGoTo(t, tp, vip, 24)
		return dist["rs1"] == 0 && dist["error"] == 0
	})
	// rs1 stays a destination (weight 0, its Maglev slots kept), on every service.
	save := ipvsSave(t, tp.Director(1))
	if n := strings.Count(save, "-r 10.0.0.11:"); n != 3 {
		t.Errorf("rs1 is a destination of %d services, want 3:\n%s", n, save)
	}

	// Recovery resets nothing and rs1 takes new connections of every service again.
	off = d.logSize()
	servers["rs1"].SetHealthy(true)
	waitFor(t, 10*time.Second, "rs1 back on port 81", func() bool {
		dist := ask(t, tp.Client(), tp.ClientSources(false), netip.AddrPortFrom(vip, 81), echo.TCP, 1)
		return distribution(dist)["rs1"] > 0
	})
	if err := keep.Echo(context.Background(), "still here"); err != nil {
		t.Errorf("the connection to rs1 on the default service broke at recovery: %v", err)
	}
	if strings.Contains(d.logSince(off), "event=reset") {
		t.Errorf("recovery reset connections:\n%s", d.logSince(off))
	}
}

// TestDrainOnFailover: failover ratio 0.5, three primaries and two
// failover backends, two services alike but for drain_on_failover. When two
// primaries fail the eligible set switches to the failover pool: the
// service with drain_on_failover false drops every connection, even the one
// on the healthy primary rs3; the other keeps it. Failback likewise drops
// (or keeps) the connections on the failover pool.
func TestDrainOnFailover(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(24), topo.WithRealServers(5))
	vip := netip.MustParseAddr("10.0.0.50")
	rss := tp.RealServers()
	holdVIPOnLoopback(t, vip, rss...)
	servers := serveEcho(t, echo.Config{TCP: []uint16{80, 81}, HTTP: []uint16{8080}}, rss...)
	svc := func(name string, port int, drain bool) string {
		return fmt.Sprintf("service: %s\nvip: %s\nports: [%d]\nfailover: {ratio: 0.5, drain_on_failover: %v}\n%sbackends:\n%s",
			name, vip, port, drain, healthBlock(), backendsYAML(rss, rss[3], rss[4]))
	}
	d := newDirector(t, tp.Director(1), map[string]string{"drain": svc("drain", 80, true), "drop": svc("drop", 81, false)})
	d.start()
	d.waitServices(2, 5)
	waitFor(t, 5*time.Second, "the first health rounds", func() bool { return strings.Count(d.log(), "target=") >= 10 })

	// switchPool opens a connection through each service to server, makes
	// rs1 and rs2 healthy or not (the eligible set switches pool, what is
	// failover or failback) and checks that only service drop's is reset.
	switchPool := func(server string, healthy bool, what string) {
		t.Helper()
		kept := connectTo(t, tp, netip.AddrPortFrom(vip, 80), server)
		dropped := connectTo(t, tp, netip.AddrPortFrom(vip, 81), server)
		off := d.logSize()
		servers["rs1"].SetHealthy(healthy)
		servers["rs2"].SetHealthy(healthy)
		d.waitLog(off, 10*time.Second, "event=reset", "service=drop", what+" with drain_on_failover false")
		waitFor(t, 5*time.Second, "the connection of service drop reset at "+what, func() bool {
			return dropped.Echo(context.Background(), what) != nil
		})
		if err := kept.Echo(context.Background(), what); err != nil {
			t.Errorf("drain_on_failover true: the connection to %s broke at %s: %v", server, what, err)
		}
	}
	switchPool("rs3", false, "failover")
	// Settled (a destination added back takes its slot weight for one
	// netlink call before it is lowered to 0): new connections to the pool,
	// through both services — each has health checks of its own, and the
	// failback below connects to rs4 through each.
	waitFor(t, 5*time.Second, "new connections to the failover pool", func() bool {
		for _, port := range []uint16{80, 81} {
			dist := distribution(ask(t, tp.Client(), tp.ClientSources(false), netip.AddrPortFrom(vip, port), echo.TCP, 1))
			if dist["rs4"]+dist["rs5"] != 24 {
				return false
			}
		}
		return true
	})
	switchPool("rs4", true, "failback")
	if strings.Contains(d.log(), "event=reset service=drain ") {
		t.Errorf("service drain (drain_on_failover true) reset connections:\n%s", d.log())
	}
	// Every destination is back.
	if n := strings.Count(ipvsSave(t, tp.Director(1)), "-r 10.0.0."); n != 10 {
		t.Errorf("%d destinations after the resets, want 10:\n%s", n, ipvsSave(t, tp.Director(1)))
	}
}
