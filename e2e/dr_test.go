//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

func itoa(n int) string { return strconv.Itoa(n) }

// TestDR: a DR service with the default Maglev scheduler and client-ip
// affinity spreads clients over both real servers, always sends one client
// address to the same server, and the servers see the client's own address.
func TestDR(t *testing.T) {
	for _, fam := range []struct {
		name string
		v6   bool
		vip  string
	}{{"IPv4", false, "10.0.0.50"}, {"IPv6", true, "fd00::50"}} {
		t.Run(fam.name, func(t *testing.T) {
			tp := topo.New(t, topo.WithClientSources(32))
			vip := netip.MustParseAddr(fam.vip)
			rs1, rs2 := tp.RS(1), tp.RS(2)
			holdVIPOnLoopback(t, vip, rs1, rs2)
			serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)

			d := newDirector(t, tp.Director(1), map[string]string{"web": fmt.Sprintf(
				"service: web\nvip: %s\nports: [80]\nforwarding: dr\naffinity: client-ip\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
				vip, rs1.Addr(fam.v6), rs2.Addr(fam.v6))})
			d.start()
			d.waitServices(1, 2)

			sources := tp.ClientSources(fam.v6)
			if len(sources) < 16 {
				t.Fatalf("only %d client sources, want ≥16", len(sources))
			}
			results := ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, 80), echo.TCP, 3)
			expectFromClient(t, "DR, 3 connections per source", results, at(netip.AddrPortFrom(vip, 80)), "rs1", "rs2")
			chosen := map[netip.Addr]string{}
			for _, r := range results {
				if prev, ok := chosen[r.src]; ok && r.err == nil && prev != r.reply.Name {
					t.Errorf("source %s went to %s and to %s; client-ip affinity must pin it", r.src, prev, r.reply.Name)
				}
				if r.err == nil {
					chosen[r.src] = r.reply.Name
				}
			}

			table := run(t, tp.Director(1), "ipvsadm", "-Ln")
			t.Logf("ipvsadm -Ln on the director:\n%s", table)
			if !strings.Contains(table, " mh") {
				t.Errorf("ipvsadm -Ln does not show the mh scheduler")
			}
			if !strings.Contains(table, "Route") {
				t.Errorf("ipvsadm -Ln does not show direct routing (Route)")
			}
		})
	}
}
