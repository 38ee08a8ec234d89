//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// TestUDP: a UDP DR service (IPv4 and IPv6) becomes a UDP IPVS service;
// datagrams from many client addresses are answered by both real servers,
// from the VIP, and the servers see the client's own address.
func TestUDP(t *testing.T) {
	for _, fam := range []struct {
		name string
		v6   bool
		vip  string
	}{{"IPv4", false, "10.0.0.53"}, {"IPv6", true, "fd00::53"}} {
		t.Run(fam.name, func(t *testing.T) {
			tp := topo.New(t, topo.WithClientSources(24))
			vip := netip.MustParseAddr(fam.vip)
			rs1, rs2 := tp.RS(1), tp.RS(2)
			holdVIPOnLoopback(t, vip, rs1, rs2)
			servers := serveEcho(t, echo.Config{UDP: []uint16{53}}, rs1, rs2)
			director := tp.Director(1)
			d := newDirector(t, director, map[string]string{"dns": fmt.Sprintf(
				"service: dns\nvip: %q\nprotocol: udp\nports: [53]\nforwarding: dr\nbackends:\n  - {address: %q}\n  - {address: %q}\n",
				vip, rs1.Addr(fam.v6), rs2.Addr(fam.v6))})
			d.start()
			svcs := d.waitServices(1, 2)
			if want := (ipvs.ServiceKey{Protocol: l4.UDP, Addr: vip, Port: 53, IPv6: fam.v6}); svcs[0].ServiceKey != want {
				t.Fatalf("kernel service is %s, want %s", svcs[0].ServiceKey, want)
			}

			sources := tp.ClientSources(fam.v6)
			// Every Ask is a new socket, hence a new source port and a new
			// IPVS UDP connection entry.
			results := ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, 53), echo.UDP, 2)
			dist := expectFromClient(t, "UDP", results, at(netip.AddrPortFrom(vip, 53)), "rs1", "rs2")
			// The servers' own counters agree: every datagram they got came
			// from one of the client's addresses, none was lost or doubled.
			isSource := map[netip.Addr]bool{}
			for _, s := range sources {
				isSource[s] = true
			}
			for name, s := range servers {
				n := 0
				for peer, c := range s.Seen(echo.UDP) {
					if !isSource[peer] {
						t.Errorf("%s got %d datagrams from %s, not a client source", name, c, peer)
					}
					n += c
				}
				if n != dist[name] {
					t.Errorf("%s counted %d datagrams, the client got %d answers from it", name, n, dist[name])
				}
			}
			table := run(t, director, "ipvsadm", "-Ln")
			if !strings.Contains(table, "UDP  "+netip.AddrPortFrom(vip, 53).String()) || !strings.Contains(table, "Route") {
				t.Errorf("ipvsadm -Ln does not show a UDP DR service on %s:\n%s", netip.AddrPortFrom(vip, 53), table)
			}
		})
	}
}
