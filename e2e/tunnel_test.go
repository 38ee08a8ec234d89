//go:build e2e

package e2e

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/ipvs"
)

// The tunnel tests (issue 18) run lvsd on both ends: a director with a
// forwarding tunnel service, and real servers with role realserver and a
// realserver.tunnel block, in another subnet than the director, behind a
// router (tunnelNet).

func TestTunnelIPIP(t *testing.T) {
	testTunnel(t, false, "", "  tunnel: {vips: [10.0.0.50]}\n", ipvs.TunnelOptions{})
}

func TestTunnelGUE(t *testing.T) {
	testTunnel(t, false, "tunnel: {encap: gue, port: 6080, checksum: checksum}\n", "  tunnel: {vips: [10.0.0.50], encap: gue, port: 6080}\n",
		ipvs.TunnelOptions{Type: ipvs.TunnelGUE, Port: 6080, Flags: ipvs.TunnelChecksum})
}

func TestTunnelGRE(t *testing.T) {
	testTunnel(t, false, "tunnel: {encap: gre}\n", "  tunnel: {vips: [10.0.0.50], encap: gre}\n",
		ipvs.TunnelOptions{Type: ipvs.TunnelGRE})
}

func TestTunnelIPv6(t *testing.T) {
	testTunnel(t, true, "", "  tunnel: {vips: [\"fd00::50\"]}\n", ipvs.TunnelOptions{})
}

// testTunnel: from 32 client sources, connections through the VIP reach
// both real servers, each of which sees the client's own address on the
// VIP; the replies go from the real servers through the router to the
// client and none reaches the director (packet captures on both); the
// kernel holds Tunnel destinations with the wanted encapsulation, and lvsd
// reads them back as it wrote them (its next passes change nothing).
func testTunnel(t *testing.T, v6 bool, serviceTunnel, rsBlock string, want ipvs.TunnelOptions) {
	tn := newTunnelNet(t, 32, 2)
	vip := tunnelVIP(v6)
	startRealServers(t, rsBlock, tn.rss...)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tn.rss...)
	director := tn.tp.Director(1)
	d := newDirector(t, director, map[string]string{"web": tn.tunnelService(v6, serviceTunnel, 80)})
	d.start()
	d.waitServices(1, len(tn.rss))

	atDirector := startCapture(t, director, director.Link)
	atRouter := startCapture(t, tn.router, "eth1")
	dst := netip.AddrPortFrom(vip, 80)
	results := ask(t, tn.tp.Client(), tn.tp.ClientSources(v6), dst, echo.TCP, 2)
	expectFromClient(t, "tunnel, 2 connections per source", results, at(dst), "rs1", "rs2")
	tn.checkDirectReturn(t, atDirector, atRouter, vip, 80)

	table := run(t, director, "ipvsadm", "-Ln", "--tun-info")
	t.Logf("ipvsadm -Ln --tun-info on the director:\n%s", table)
	if strings.Count(table, "Tunnel") < len(tn.rss) {
		t.Errorf("ipvsadm -Ln does not show %d Tunnel destinations", len(tn.rss))
	}
	for _, dst := range tunnelDestinations(t, d, vip, 80) {
		if dst.Forwarding != ipvs.Tunnel || dst.Tunnel != want {
			t.Errorf("destination %s: %s, want tunnel %s", dst.DestinationKey, dst.Method(), want)
		}
	}
	d.expectIdle(d.logSize(), "the director's later passes (do the tunnel attributes read back as written?)")
}

// TestTunnelRealServerLifecycle: on a host as a distribution leaves it
// (tunnel modules loaded, strict rp_filter), lvsd brings up the fallback
// devices of IPv4 GUE and IPv6-in-IPv6, turns rp_filter off where they
// need it, opens the GUE port, puts the VIPs on lo and the MSS clamp in
// nftables, and traffic flows through both tunnels; a restart
// changes nothing, stopping leaves everything, and cleanup restores the
// host exactly: addresses, links (up or down), sysctls, nftables tables
// and GUE ports compared.
func TestTunnelRealServerLifecycle(t *testing.T) {
	tn := newTunnelNet(t, 4, 1)
	rs := tn.rss[0]
	loadTunnelModules(t, rs, "ipip", "ip6_tunnel", "fou")
	for _, k := range []string{"all", "tunl0"} { // RHEL-like: strict
		if err := rs.Sysctl("net/ipv4/conf/"+k+"/rp_filter", "1"); err != nil {
			t.Fatal(err)
		}
	}
	original := tunnelSnapshot(t, rs)
	l := newRealServer(t, rs, "  arp_interfaces: [eth0]\n  tunnel: {vips: [10.0.0.50, \"fd00::50\"], encap: gue, port: 6080}\n")
	l.start()
	l.waitReady(0)
	running := tunnelSnapshot(t, rs)
	added, removed := lineDiff(original, running)
	t.Logf("lvsd changed:\n+ %s\n- %s", strings.Join(added, "\n+ "), strings.Join(removed, "\n- "))
	for _, want := range []string{"addr lo 10.0.0.50/32", "addr lo fd00::50/128", "link tunl0 up=true", "link ip6tnl0 up=true",
		"sysctl ipv4/all/rp_filter=0", "sysctl ipv4/tunl0/rp_filter=0", "sysctl ipv4/all/arp_ignore=1", "sysctl ipv4/eth0/arp_announce=2",
		"nft table ip lvsd", "nft table ip6 lvsd", "fou gue port 6080"} {
		if !slices.ContainsFunc(added, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("after start, %q is missing", want)
		}
	}
	if code, _, body := probeWeight(t, tn.router, netip.AddrPortFrom(rs.V4, 9611), "/healthz"); code != 200 {
		t.Errorf("weight endpoint with the tunnel in place: %d %q", code, body)
	}
	// Traffic through both tunnels works from the strict start: what lvsd
	// changed is what it needs.
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs)
	d := newDirector(t, tn.tp.Director(1), map[string]string{
		"web":  tn.tunnelService(false, "tunnel: {encap: gue, port: 6080}\n", 80),
		"web6": strings.Replace(tn.tunnelService(true, "", 80), "service: web", "service: web6", 1),
	})
	d.start()
	d.waitServices(2, 1)
	for _, v6 := range []bool{false, true} {
		dst := netip.AddrPortFrom(tunnelVIP(v6), 80)
		expectFromClient(t, "through the tunnel", ask(t, tn.tp.Client(), tn.tp.ClientSources(v6), dst, echo.TCP, 2), at(dst), rs.ID)
	}
	d.stop()

	l = l.restart("lvsd-restarted.log")
	l.expectIdle(0, "the restarted agent")
	expectSameHost(t, "the restart", running, tunnelSnapshot(t, rs))
	l.stop()
	expectSameHost(t, "stopping the agent", running, tunnelSnapshot(t, rs))
	out, code := runLVSD(t, rs, "cleanup", "--config", l.config())
	t.Logf("lvsd cleanup:\n%s", out)
	if code != 0 {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}
	a, r := lineDiff(original, tunnelSnapshot(t, rs))
	residue := ipv6Conf(a, "tunl0")
	if len(a) != len(residue) || len(r) > 0 {
		t.Errorf("after cleanup the host differs from before lvsd:\nadded %q\nremoved %q", a, r)
	}
	t.Logf("after cleanup: the kernel keeps the IPv6 configuration (net.ipv6.conf.tunl0, %d keys) it made when tunl0 first came up", len(residue))
}

// ipv6Conf returns the lines of a snapshot diff that are dev's IPv6
// configuration. Linux gives an IPv4 tunnel device an IPv6 configuration
// the first time it comes up and keeps it until the device is deleted,
// which a module's fallback device never is: lvsd writes none of it.
func ipv6Conf(lines []string, dev string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "sysctl ipv6/"+dev+"/") {
			out = append(out, l)
		}
	}
	return out
}
