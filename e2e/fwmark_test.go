//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestPortRange: a DR service over ports 8000-8010 is one IPVS fwmark
// service fed by an nftables mark; every port of the range is served and
// keeps its port, a port outside it is not balanced.
func TestPortRange(t *testing.T) {
	tp := topo.New(t)
	vip := netip.MustParseAddr("10.0.0.50")
	holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2))
	ports := []uint16{8000, 8005, 8010, 8011}
	serveEcho(t, echo.Config{TCP: ports}, tp.RS(1), tp.RS(2))
	d := newDirector(t, tp.Director(1), map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [\"8000-8010\"]\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
		vip, tp.RS(1).V4, tp.RS(2).V4)})
	d.start()
	d.waitServices(1, 2)

	sources := tp.ClientSources(false)[:16]
	for _, port := range ports[:3] {
		results := ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, port), echo.TCP, 2)
		dist := distribution(results)
		t.Logf("port %d: %s", port, formatDistribution(dist))
		for _, r := range results {
			if r.err != nil {
				t.Errorf("port %d from %s: %v", port, r.src, r.err)
			} else if r.reply.Local != netip.AddrPortFrom(vip, port) {
				t.Errorf("port %d: %s answered on %s", port, r.reply.Name, r.reply.Local)
			}
		}
		if dist["rs1"] == 0 || dist["rs2"] == 0 {
			t.Errorf("port %d: replies came from %s, want both rs1 and rs2", port, formatDistribution(dist))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if rep, err := echo.Ask(ctx, tp.Client(), sources[0], netip.AddrPortFrom(vip, 8011), echo.TCP); err == nil {
		t.Errorf("port 8011 (outside the range) was balanced to %s", rep.Name)
	}
	t.Logf("nft list table ip lvsd:\n%s", run(t, tp.Director(1), "nft", "list", "table", "ip", "lvsd"))
}

// TestAllPorts: protocol any with ports [all] takes TCP and UDP on any port
// (seed 001's L3_DEFAULT), through one fwmark service.
func TestAllPorts(t *testing.T) {
	tp := topo.New(t)
	vip := netip.MustParseAddr("10.0.0.50")
	holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2))
	serveEcho(t, echo.Config{TCP: []uint16{80, 9999}, UDP: []uint16{53}}, tp.RS(1), tp.RS(2))
	serveSCTP(t, 9899, tp.RS(1), tp.RS(2))
	d := newDirector(t, tp.Director(1), map[string]string{"all": fmt.Sprintf(
		"service: all\nvip: %s\nprotocol: any\nports: [all]\naffinity: client-ip\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
		vip, tp.RS(1).V4, tp.RS(2).V4)})
	d.start()
	d.waitServices(1, 2)

	sources := tp.ClientSources(false)[:16]
	for _, target := range []struct {
		proto string
		port  uint16
	}{{echo.TCP, 80}, {echo.TCP, 9999}, {echo.UDP, 53}} {
		results := ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, target.port), target.proto, 1)
		dist := distribution(results)
		t.Logf("%s/%d: %s", target.proto, target.port, formatDistribution(dist))
		if dist["error"] > 0 || dist["rs1"] == 0 || dist["rs2"] == 0 {
			t.Errorf("%s/%d: replies %s, want all answered by both servers", target.proto, target.port, formatDistribution(dist))
		}
	}
	// SCTP, the third protocol IPVS balances: associations from the
	// sources reach both servers, each source its one server (client-ip).
	sctp := map[string]int{}
	byTCP := map[netip.Addr]string{}
	for _, r := range ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, 80), echo.TCP, 1) {
		if r.err == nil {
			byTCP[r.src] = r.reply.Name
		}
	}
	for _, src := range sources {
		name, err := askSCTP(tp.Client(), src, netip.AddrPortFrom(vip, 9899))
		if err != nil {
			t.Errorf("sctp/9899 from %s: %v", src, err)
			continue
		}
		sctp[name]++
		if want := byTCP[src]; want != "" && name != want {
			t.Errorf("source %s reached %s over SCTP but %s over TCP (client-ip affinity)", src, name, want)
		}
	}
	t.Logf("sctp/9899: %v", sctp)
	if sctp["rs1"] == 0 || sctp["rs2"] == 0 {
		t.Errorf("sctp/9899: answers %v, want both servers", sctp)
	}
	// client-ip affinity on a protocol-agnostic service: one client reaches
	// the same server whatever the protocol and port.
	src := sources[3]
	var first string
	for _, target := range []struct {
		proto string
		port  uint16
	}{{echo.TCP, 80}, {echo.TCP, 9999}, {echo.UDP, 53}} {
		rep, err := echo.Ask(context.Background(), tp.Client(), src, netip.AddrPortFrom(vip, target.port), target.proto)
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = rep.Name
		} else if rep.Name != first {
			t.Errorf("source %s reached %s on %s/%d but %s before", src, rep.Name, target.proto, target.port, first)
		}
	}
}

// TestSteering: services on the same VIP and port split clients by source
// range, the longest matching prefix winning (seed 001): 10.0.0.112/28 →
// rs3, the rest of 10.0.0.96/27 → rs2, everyone else → rs1.
func TestSteering(t *testing.T) {
	tp := topo.New(t, topo.WithRealServers(3))
	vip := netip.MustParseAddr("10.0.0.50")
	holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2), tp.RS(3))
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2), tp.RS(3))
	svc := func(name string, rs *topo.Host, ranges string) string {
		return fmt.Sprintf("service: %s\nvip: %s\nports: [80]\n%sbackends:\n  - {address: %s}\n", name, vip, ranges, rs.V4)
	}
	d := newDirector(t, tp.Director(1), map[string]string{
		"a": svc("pool-a", tp.RS(1), ""),
		"b": svc("pool-b", tp.RS(2), "source_ranges: [10.0.0.96/27]\n"),
		"c": svc("pool-c", tp.RS(3), "source_ranges: [10.0.0.112/28]\n"),
	})
	d.start()
	d.waitServices(3, 1)

	b, c := netip.MustParsePrefix("10.0.0.96/27"), netip.MustParsePrefix("10.0.0.112/28")
	sources := append(tp.ClientSources(false), tp.Client().V4)
	results := ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, 80), echo.TCP, 1)
	t.Logf("steering over %d sources: %s", len(sources), formatDistribution(distribution(results)))
	for _, r := range results {
		want := "rs1"
		switch {
		case c.Contains(r.src):
			want = "rs3"
		case b.Contains(r.src):
			want = "rs2"
		}
		if r.err != nil {
			t.Errorf("from %s: %v", r.src, r.err)
		} else if r.reply.Name != want {
			t.Errorf("source %s reached %s, want %s", r.src, r.reply.Name, want)
		}
	}
}
