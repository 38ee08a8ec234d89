//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// routedSources are the client's source addresses that the other hosts reach
// through a route (10.1.0.0/16), not on-link: so a test can make the real
// servers send replies to the director, or give them no route at all.
func routedSources(t *testing.T, tp *topo.Topology) []netip.Addr {
	t.Helper()
	routed := netip.MustParsePrefix("10.1.0.0/16")
	var out []netip.Addr
	for _, a := range tp.ClientSources(false) {
		if routed.Contains(a) {
			out = append(out, a)
		}
	}
	if len(out) < 16 {
		t.Fatalf("only %d routed client sources; build the topology with more", len(out))
	}
	return out
}

func readSysctl(t *testing.T, h *topo.Host, key string) string {
	t.Helper()
	v, err := h.ReadSysctl(key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(v)
}

// TestNAT: IPVS masquerading with a port change; real servers route client
// traffic back through the director and see the client's own address; lvsd
// turned on forwarding itself.
func TestNAT(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(180))
	director := tp.Director(1)
	for _, rs := range tp.RealServers() {
		if err := rs.AddRoute(netip.MustParsePrefix("10.1.0.0/16"), director.V4); err != nil {
			t.Fatal(err)
		}
	}
	serveEcho(t, echo.Config{TCP: []uint16{8080}}, tp.RS(1), tp.RS(2))
	vip := netip.MustParseAddr("10.0.0.50")
	d := newDirector(t, director, map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [80]\nforwarding: nat\nbackends:\n  - {address: %s, port: 8080}\n  - {address: %s, port: 8080}\n",
		vip, tp.RS(1).V4, tp.RS(2).V4)})
	d.start()
	d.waitServices(1, 2)
	// One-armed NAT: replies leave by the interface they came in on, so the
	// director must not send ICMP redirects (they would send real servers
	// around the reverse NAT).
	for key, want := range map[string]string{"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/send_redirects": "0",
		"net/ipv4/conf/" + director.Link + "/send_redirects": "0"} {
		if got := readSysctl(t, director, key); got != want {
			t.Fatalf("lvsd left %s=%s on the director, want %s for NAT", key, got, want)
		}
	}

	sources := routedSources(t, tp)
	// NAT rewrites the destination: each server gets the request on its own address, port 8080.
	results := ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, 80), echo.TCP, 2)
	expectFromClient(t, "NAT", results, func(r echo.Reply) netip.AddrPort {
		return netip.AddrPortFrom(tp.Host(r.Name).V4, 8080)
	}, "rs1", "rs2")
	t.Logf("ipvsadm -Ln:\n%s", run(t, director, "ipvsadm", "-Ln"))
}

// TestFullNAT: IPVS NAT plus nftables source NAT: real servers see one of the
// director's SNAT addresses, not the client, and need no route to the client.
func TestFullNAT(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(180))
	director := tp.Director(1)
	for _, rs := range tp.RealServers() {
		if err := rs.DelRoute(netip.MustParsePrefix("10.1.0.0/16")); err != nil {
			t.Fatal(err)
		}
	}
	sources := routedSources(t, tp)
	if out, err := tp.RS(1).Run(context.Background(), "ip", "route", "get", sources[0].String()); err == nil {
		t.Fatalf("rs1 still has a route to the client %s: %s", sources[0], out)
	}
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	vip := netip.MustParseAddr("10.0.0.50")
	snat := []netip.Addr{netip.MustParseAddr("10.0.0.200"), netip.MustParseAddr("10.0.0.201")}
	d := newDirector(t, director, map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [80]\nforwarding: fullnat\nfullnat: {source_addresses: [%s, %s]}\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
		vip, snat[0], snat[1], tp.RS(1).V4, tp.RS(2).V4)})
	d.start()
	d.waitServices(1, 2)
	for key, want := range map[string]string{"net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1"} {
		if got := readSysctl(t, director, key); got != want {
			t.Fatalf("lvsd left %s=%s on the director, want %s for FULLNAT", key, got, want)
		}
	}

	results := ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, 80), echo.TCP, 2)
	dist := distribution(results)
	t.Logf("FULLNAT distribution over %d sources × 2: %s", len(sources), formatDistribution(dist))
	seenSNAT := map[netip.Addr]int{}
	for _, r := range results {
		if r.err != nil {
			t.Errorf("from %s: %v", r.src, r.err)
			continue
		}
		peer := r.reply.Peer.Addr()
		if peer != snat[0] && peer != snat[1] {
			t.Errorf("%s saw peer %s, want one of the SNAT addresses %v", r.reply.Name, peer, snat)
		}
		seenSNAT[peer]++
	}
	t.Logf("real servers saw SNAT addresses: %v", seenSNAT)
	if dist["rs1"] == 0 || dist["rs2"] == 0 {
		t.Errorf("replies came from %s, want both rs1 and rs2", formatDistribution(dist))
	}
	t.Logf("nft list table ip lvsd:\n%s", run(t, director, "nft", "list", "table", "ip", "lvsd"))
}
