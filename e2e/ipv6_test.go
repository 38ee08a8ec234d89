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

// TestIPv6 covers NAT with an IPv6 VIP (DR over IPv6 is TestDR/IPv6): lvsd
// programs a masquerading service [fd00::60]:80 → [fd00::11]:8080 and
// [fd00::12]:8080 and turns on IPv6 forwarding; the real servers route
// their replies through the director, see the client's own address on
// port 8080, and the client completes its connection to VIP:80 (the
// director rewrote the replies' source; a reply from [fd00::1x]:8080 would
// not match the client's socket).
func TestIPv6(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(16))
	director := tp.Director(1)
	vip := netip.MustParseAddr("fd00::60")
	sources := tp.ClientSources(true) // fd00::100 … fd00::115
	// The subnet is flat: without help the real servers would answer the
	// client on-link, bypassing the director. fd00::100/120 is more
	// specific than the on-link /64 and covers every extra client source.
	viaDirector := netip.MustParsePrefix("fd00::100/120")
	for _, s := range sources {
		if !viaDirector.Contains(s) {
			t.Fatalf("client source %s is outside %s; adjust the route", s, viaDirector)
		}
	}
	for _, rs := range []*topo.Host{tp.RS(1), tp.RS(2)} {
		if err := rs.AddRoute(viaDirector, director.V6); err != nil {
			t.Fatal(err)
		}
		// The real servers accept ICMPv6 redirects (the default): the
		// director must not send any ("the client is on-link"), or they
		// would answer around the reverse NAT. lvsd drops them.
	}
	servers := serveEcho(t, echo.Config{TCP: []uint16{8080}}, tp.RS(1), tp.RS(2))

	d := newDirector(t, director, map[string]string{"web6": fmt.Sprintf(
		"service: web6\nvip: %q\nports: [80]\nforwarding: nat\nbackends:\n  - {address: %q, port: 8080}\n  - {address: %q, port: 8080}\n",
		vip, tp.RS(1).V6, tp.RS(2).V6)})
	d.start()
	d.waitServices(1, 2)
	// Replies from the real servers are forwarded packets: without
	// forwarding the director drops them before IPVS can rewrite them.
	if got := readSysctl(t, director, "net/ipv6/conf/all/forwarding"); got != "1" {
		t.Fatalf("lvsd left net.ipv6.conf.all.forwarding=%s on the director, want 1 for an IPv6 NAT service", got)
	}
	k := d.ipvs()
	key := ipvs.ServiceKey{Protocol: l4.TCP, Addr: vip, Port: 80, IPv6: true}
	dests := destinations(t, k, key)
	for _, rs := range []*topo.Host{tp.RS(1), tp.RS(2)} {
		want := ipvs.DestinationKey{Addr: rs.V6, Port: 8080}
		found := false
		for _, dst := range dests {
			if dst.DestinationKey == want {
				found = true
				if dst.Forwarding != ipvs.Masquerade {
					t.Errorf("destination %s forwards by %s, want masq", want, dst.Forwarding)
				}
			}
		}
		if !found {
			t.Errorf("no destination %s in %s: %v", want, key, dests)
		}
	}

	// NAT rewrites the destination: each server gets the request on its own address, port 8080.
	results := ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, 80), echo.TCP, 2)
	expectFromClient(t, "IPv6 NAT", results, func(r echo.Reply) netip.AddrPort {
		return netip.AddrPortFrom(tp.Host(r.Name).V6, 8080)
	}, "rs1", "rs2")
	for name, s := range servers {
		for peer := range s.Seen(echo.TCP) {
			if !viaDirector.Contains(peer) {
				t.Errorf("%s had a connection from %s, not a client source", name, peer)
			}
		}
	}
	if table := run(t, director, "ipvsadm", "-Ln"); !strings.Contains(table, "Masq") {
		t.Errorf("ipvsadm -Ln does not show masquerading:\n%s", table)
	}
}

// destinations reads one service's destinations from the kernel.
func destinations(t *testing.T, k *ipvs.Kernel, key ipvs.ServiceKey) []ipvs.Destination {
	t.Helper()
	d, err := k.Destinations(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
