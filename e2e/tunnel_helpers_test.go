//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// The tunnel tests' topology: the client and the director on the
// topology's bridge (10.0.0.0/24, fd00::/64), the real servers on a
// segment (10.0.2.0/24, fd02::/64) behind a router (10.0.0.254, fd00::254;
// 10.0.2.254, fd02::254). The director reaches the real servers only
// through the router, and their replies go back to the client through the
// router, never through the director.
type tunnelNet struct {
	tp     *topo.Topology
	router *topo.Host
	rss    []*topo.Host
}

var (
	tunnelVIP4 = netip.MustParseAddr("10.0.0.50")
	tunnelVIP6 = netip.MustParseAddr("fd00::50")
)

func tunnelVIP(v6 bool) netip.Addr {
	if v6 {
		return tunnelVIP6
	}
	return tunnelVIP4
}

// newTunnelNet builds the routed topology with n real servers (rs1, rs2, …).
func newTunnelNet(t *testing.T, sources, n int) tunnelNet {
	t.Helper()
	tp := topo.New(t, topo.WithRealServers(0), topo.WithClientSources(sources))
	router, err := tp.AddHost("router", netip.MustParsePrefix("10.0.0.254/24"), netip.MustParsePrefix("fd00::254/64"))
	if err != nil {
		t.Fatal(err)
	}
	seg, err := tp.AddSegment(router, netip.MustParsePrefix("10.0.2.254/24"), netip.MustParsePrefix("fd02::254/64"))
	if err != nil {
		t.Fatal(err)
	}
	tn := tunnelNet{tp: tp, router: router}
	for i := 1; i <= n; i++ {
		rs, err := seg.AddHost(fmt.Sprintf("rs%d", i), netip.MustParsePrefix(fmt.Sprintf("10.0.2.%d/24", 10+i)),
			netip.MustParsePrefix(fmt.Sprintf("fd02::%d/64", 10+i)))
		if err != nil {
			t.Fatal(err)
		}
		tn.rss = append(tn.rss, rs)
	}
	return tn
}

// tunnelService is the director's service file: forwarding tunnel with the
// given tunnel block ("" for the IPIP default), one backend per real server.
func (tn tunnelNet) tunnelService(v6 bool, tunnelBlock string, port int) string {
	s := fmt.Sprintf("service: web\nvip: \"%s\"\nports: [%d]\nforwarding: tunnel\naffinity: client-ip\n%sbackends:\n",
		tunnelVIP(v6), port, tunnelBlock)
	for _, rs := range tn.rss {
		s += fmt.Sprintf("  - {address: \"%s\"}\n", rs.Addr(v6))
	}
	return s
}

// tunnelDestinations reads the director's destinations of the service back
// through lvsd's ipvs package (its own netlink for the tunnel attributes).
func tunnelDestinations(t *testing.T, d *lvsd, vip netip.Addr, port uint16) []ipvs.Destination {
	t.Helper()
	k := d.ipvs()
	dsts, err := k.Destinations(context.Background(), ipvs.ServiceKey{Protocol: l4.TCP, Addr: vip, Port: port, IPv6: vip.Is6()})
	if err != nil {
		t.Fatal(err)
	}
	return dsts
}

// replyFrames counts the captured TCP frames that come from vip:port (the
// real servers' replies), by source MAC.
func replyFrames(c *capture, vip netip.Addr, port uint16) map[string]int {
	out := map[string]int{}
	for _, f := range c.frames() {
		if f.kind == "tcp" && f.ip == vip && f.port == port {
			out[f.src]++
		}
	}
	return out
}

// checkDirectReturn asserts that replies went from the real servers to the
// client through the router and that none reached the director: the
// director's link saw none, the router's segment link saw them from the
// real servers.
func (tn tunnelNet) checkDirectReturn(t *testing.T, atDirector, atRouter *capture, vip netip.Addr, port uint16) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // the last frames
	atDirector.stop()
	atRouter.stop()
	if n := replyFrames(atDirector, vip, port); len(n) > 0 {
		t.Errorf("reply frames from %s on the director's link, by source MAC: %v; want none (direct return)", netip.AddrPortFrom(vip, port), n)
	}
	seen := replyFrames(atRouter, vip, port)
	for _, rs := range tn.rss {
		if seen[rs.MAC.String()] == 0 {
			t.Errorf("no reply frame of %s reached the router (by source MAC: %v): the check above proved nothing", rs.ID, seen)
		}
	}
	t.Logf("reply frames: %v at the router's segment link, %d at the director's link", seen, len(replyFrames(atDirector, vip, port)))
}

// tunnelSnapshot is hostSnapshot plus what only the tunnel setup touches:
// lvsd's nftables tables and the GUE ports.
func tunnelSnapshot(t *testing.T, h *topo.Host) string {
	t.Helper()
	lines := []string{hostSnapshot(t, h)}
	tables, err := h.Run(context.Background(), "nft", "list", "tables")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(tables), "\n") {
		if l != "" {
			lines = append(lines, "nft "+l)
		}
	}
	var ports []arp.FouPort
	err = h.Do(func() (err error) {
		ports, err = arp.KernelTunnels{}.FouPorts(context.Background())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		lines = append(lines, "fou "+p.String())
	}
	slices.Sort(lines[1:])
	return strings.Join(lines, "\n")
}

// loadTunnelModules loads the modules whose fallback devices the tunnel
// setup uses. Loading is host-wide and lvsd never unloads a module (docs/
// realserver.md), so a test that compares a host before and after lvsd
// loads them first: the devices then exist, down, in both snapshots.
func loadTunnelModules(t *testing.T, h *topo.Host, modules ...string) {
	t.Helper()
	run(t, h, "modprobe", append([]string{"-a"}, modules...)...)
}

// decapsulateIPIP does by hand what lvsd's real-server role does for IPv4
// IPIP (tests that want the director alone under test): tunl0 up, without
// a reverse-path filter (the topology's "all" is 0 already). Put the VIP on
// lo with holdVIPOnLoopback.
func decapsulateIPIP(t *testing.T, hosts ...*topo.Host) {
	t.Helper()
	for _, h := range hosts {
		err := h.Do(func() error {
			tun := arp.KernelTunnels{}
			if _, err := tun.CreateLink(context.Background(), "tunl0", arp.KindIPIP); err != nil {
				return err
			}
			return tun.SetUp(context.Background(), "tunl0", true)
		})
		if err == nil {
			err = h.Sysctl("net/ipv4/conf/tunl0/rp_filter", "0")
		}
		if err != nil {
			t.Fatalf("tunl0 on %v: %v", h, err)
		}
	}
}
