//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mdarp "github.com/mdlayher/arp"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// Tests of VIPs and real servers on several interfaces: a two-armed NAT
// director pair (clients on eth0, real servers on eth1 behind a floating
// gateway) and VIPs on two VLANs.

// addrsOn returns the addresses on h's interface dev.
func addrsOn(t *testing.T, h *topo.Host, dev string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	err := h.Do(func() (err error) {
		out, err = arp.Kernel{}.List(context.Background(), dev)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// placement says, per director, on which interface each of addrs is
// ("d1: 10.0.0.50@eth0 10.0.1.1@eth1; d2: none"), devs being where to look.
func placement(t *testing.T, tp *topo.Topology, devs []string, addrs ...netip.Addr) string {
	t.Helper()
	var parts []string
	for _, d := range tp.Directors() {
		var on []string
		for _, dev := range devs {
			ps := addrsOn(t, d, dev)
			for _, a := range addrs {
				if slices.Contains(ps, netip.PrefixFrom(a, a.BitLen())) {
					on = append(on, a.String()+"@"+dev)
				}
			}
		}
		if len(on) == 0 {
			on = []string{"none"}
		}
		parts = append(parts, d.ID+": "+strings.Join(on, " "))
	}
	return strings.Join(parts, "; ")
}

// waitPlacement waits until placement is want.
func waitPlacement(t *testing.T, tp *topo.Topology, devs []string, want string, timeout time.Duration, addrs ...netip.Addr) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := placement(t, tp, devs, addrs...)
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("after %v the addresses are at %q, want %q", timeout, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNeighbourOn waits until h's neighbour entry for ip on dev is mac.
func waitNeighbourOn(t *testing.T, h *topo.Host, dev string, ip netip.Addr, mac net.HardwareAddr, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := neighbour(t, h, dev, ip)
		if got == mac.String() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's neighbour entry for %s on %s is %q after %v, want %s", h.ID, ip, dev, got, timeout, mac)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// garpSeen is one gratuitous ARP a host received.
type garpSeen struct {
	at  time.Time
	ip  netip.Addr
	mac string
}

// garpLog records the gratuitous ARPs (sender address = target address)
// arriving on one interface of a host.
type garpLog struct {
	mu   sync.Mutex
	seen []garpSeen
	c    *mdarp.Client
	done chan struct{}
}

// captureGARP records the gratuitous ARPs arriving on h's dev until the
// test ends.
func captureGARP(t *testing.T, h *topo.Host, dev string) *garpLog {
	t.Helper()
	g := &garpLog{done: make(chan struct{})}
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		g.c, err = mdarp.Dial(ifi)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var closing atomic.Bool
	go func() {
		defer close(g.done)
		for {
			p, _, err := g.c.Read()
			if err != nil {
				if closing.Load() {
					return
				}
				time.Sleep(10 * time.Millisecond) // a frame that is no ARP packet: read on
				continue
			}
			if p.SenderIP == p.TargetIP {
				g.mu.Lock()
				g.seen = append(g.seen, garpSeen{time.Now(), p.SenderIP, p.SenderHardwareAddr.String()})
				g.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		closing.Store(true)
		g.c.Close()
		select {
		case <-g.done:
		case <-time.After(5 * time.Second):
			t.Logf("the capture on %s of %s did not end 5 s after its socket was closed", dev, h.ID)
		}
	})
	return g
}

// waitFrom waits until a gratuitous ARP for ip from mac arrived after since.
func (g *garpLog) waitFrom(t *testing.T, what string, ip netip.Addr, mac net.HardwareAddr, since time.Time, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if g.any(ip, since, func(s garpSeen) bool { return s.mac == mac.String() }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no gratuitous ARP for %s from %s within %v (seen: %v)", what, ip, mac, timeout, g.all())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// any reports whether a gratuitous ARP for ip after since satisfies ok.
func (g *garpLog) any(ip netip.Addr, since time.Time, ok func(garpSeen) bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.ContainsFunc(g.seen, func(s garpSeen) bool { return s.ip == ip && !s.at.Before(since) && ok(s) })
}

func (g *garpLog) all() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, s := range g.seen {
		out = append(out, s.at.Format("15:04:05.000")+" "+s.ip.String()+" "+s.mac)
	}
	return out
}

// startInterfaceDirectors starts lvsd on both directors of tp in one
// active-standby cluster (director first, priority 200) with the given
// service files.
func startInterfaceDirectors(t *testing.T, tp *topo.Topology, services map[string]string) []*lvsd {
	t.Helper()
	key := clusterKey(t)
	var ds []*lvsd
	for i, d := range tp.Directors() {
		l := newClusterDirector(t, tp, d, key, fmt.Sprintf("  priority: %d\n", 200-100*i))
		for name, body := range services {
			writeFile(t, filepath.Join(l.dir, "services.d", name+".yaml"), body)
		}
		l.start()
		ds = append(ds, l)
	}
	return ds
}

// TestTwoArmedNAT: clients on the directors' eth0, real servers on their
// eth1 in 10.0.1.0/24 with the floating address 10.0.1.1 (nat.gateway on
// nat.gateway_interface eth1) as their default gateway, a NAT service, an
// active-standby pair. A 20/s prober and 40 long-lived connections run
// while the VIP and the gateway move together, on their own interfaces:
// to the standby when the owner's eth0 port is cut and back when it
// returns, then to the standby when the owner's eth1 goes down (the VIP's
// gateway interface is followed) and back. After each move new
// connections succeed, the real servers' neighbour entry for the gateway
// points at the new holder's eth1 (its gratuitous ARP on eth1) and the
// client's for the VIP at its eth0; every long-lived connection survives.
func TestTwoArmedNAT(t *testing.T) {
	fdLimit(t, 1024)
	tp := topo.New(t, topo.WithDirectors(2), topo.WithRealServers(0), topo.WithClientSources(0))
	lan, err := tp.AddLAN()
	if err != nil {
		t.Fatal(err)
	}
	d1, d2 := tp.Director(1), tp.Director(2)
	inside := map[string]net.HardwareAddr{}
	for i, d := range []*topo.Host{d1, d2} {
		mac, err := lan.Plug(d, "eth1", netip.MustParsePrefix(fmt.Sprintf("10.0.1.%d/24", i+2)))
		if err != nil {
			t.Fatal(err)
		}
		inside[d.ID] = mac
	}
	vip, gw := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.1.1")
	var rss []*topo.Host
	for i := range 2 {
		rs, err := lan.AddHost(fmt.Sprintf("in%d", i+1), netip.MustParsePrefix(fmt.Sprintf("10.0.1.%d/24", 11+i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.SetDefaultRoute(gw); err != nil {
			t.Fatal(err)
		}
		rss = append(rss, rs)
	}
	serveEcho(t, echo.Config{TCP: []uint16{80, survEcho}}, rss...)
	for _, rs := range rss {
		s, err := echo.ServeTicks(t.Context(), rs, rs.ID, survTick, survInterval)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
	}
	svc := fmt.Sprintf("service: web\nvip: %s\nports: [80, %d, %d]\nforwarding: nat\nnat: {gateway: %s, gateway_interface: eth1}\n"+
		"backends:\n  - {address: %s}\n  - {address: %s}\n", vip, survEcho, survTick, gw, rss[0].V4, rss[1].V4)
	startInterfaceDirectors(t, tp, map[string]string{"web": svc})
	devs := []string{"eth0", "eth1"}
	on := func(id string) string {
		other := map[string]string{d1.ID: d2.ID, d2.ID: d1.ID}[id]
		placed := map[string]string{id: vip.String() + "@eth0 " + gw.String() + "@eth1", other: "none"}
		return d1.ID + ": " + placed[d1.ID] + "; " + d2.ID + ": " + placed[d2.ID]
	}
	waitPlacement(t, tp, devs, on(d1.ID), 30*time.Second, vip, gw)
	if got := readSysctl(t, d1, "net/ipv4/ip_forward"); got != "1" {
		t.Fatalf("ip_forward %s on the owner", got)
	}

	client := tp.Client()
	p := startProber(t, client, netip.AddrPortFrom(vip, 80), 50*time.Millisecond)
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	f := newFleet(t, client, client.V4, vip, survEcho, survTick, survInterval)
	begin := time.Now()
	if err := f.open(40, false); err != nil {
		t.Fatal(err)
	}
	if broken, waiting := f.waitExchanged(begin, 10*time.Second); len(broken) > 0 || waiting > 0 {
		t.Fatalf("before any move: %d broke, %d did not exchange: %s", len(broken), waiting, strings.Join(broken, "\n"))
	}

	type move struct {
		what   string
		to     *topo.Host
		change func() error
	}
	moves := []move{
		{"owner's eth0 port cut", d2, func() error { return d1.SetPort(false) }},
		{"owner's eth0 port back", d1, func() error { return d1.SetPort(true) }},
		{"owner's eth1 down", d2, func() error { return d1.SetLink("eth1", false) }},
		{"owner's eth1 up", d1, func() error { return d1.SetLink("eth1", true) }},
	}
	var report []string
	for _, m := range moves {
		time.Sleep(2 * time.Second)
		at := time.Now()
		if err := m.change(); err != nil {
			t.Fatal(err)
		}
		took := waitPlacement(t, tp, devs, on(m.to.ID), 30*time.Second, vip, gw)
		p.waitSuccessAfter(t, time.Now(), 10*time.Second)
		for _, rs := range rss {
			waitNeighbourOn(t, rs, rs.Link, gw, inside[m.to.ID], 5*time.Second)
		}
		waitNeighbourOn(t, client, client.Link, vip, m.to.MAC, 5*time.Second)
		time.Sleep(time.Second)
		gap := p.gap(at.Add(-500*time.Millisecond), time.Now())
		report = append(report, fmt.Sprintf("%s: VIP and gateway on %s after %v, new connections' gap %v",
			m.what, m.to.ID, took.Round(time.Millisecond), gap.Round(time.Millisecond)))
	}
	time.Sleep(2 * time.Second)
	end := time.Now()
	f.stop(t, end)
	row := f.analyse(begin, end)
	t.Logf("two-armed NAT, 4 moves:\n%s\nlong-lived: %d/%d survived, longest stall %v\n%s", strings.Join(report, "\n"),
		row.survived, row.total, row.longest.Round(time.Millisecond), strings.Join(row.failures, "\n"))
	if keep := keepDir(t); keep != "" {
		_ = os.WriteFile(filepath.Join(keep, "two-armed-nat.txt"), []byte(strings.Join(report, "\n")+"\n"), 0o644)
	}
	if row.survived != row.total {
		t.Errorf("%d of %d long-lived connections broke in the moves", row.total-row.survived, row.total)
	}
}

// TestVIPsOnTwoInterfaces: a DR VIP on the directors' eth0 and another on
// their 802.1Q interface eth0.20 (VLAN 20, 10.0.20.0/24, on the same
// link), an active-standby pair. Each VIP sits on its own interface; when
// the owner's port is cut both move to the standby, each onto its own
// interface, announced there: a gratuitous ARP for the eth0 VIP arrives
// on the client's eth0, one for the VLAN VIP on its eth0.20 (tagged), and
// none for the eth0 VIP on eth0.20. When only the owner's eth0.20 goes
// down, only the VLAN VIP moves. Traffic to both works after every move.
func TestVIPsOnTwoInterfaces(t *testing.T) {
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(0))
	client, d1, d2 := tp.Client(), tp.Director(1), tp.Director(2)
	vlan, err := client.AddVLAN("", 20, netip.MustParsePrefix("10.0.20.1/24"))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range []*topo.Host{d1, d2} {
		if _, err := d.AddVLAN("", 20, netip.MustParsePrefix(fmt.Sprintf("10.0.20.%d/24", i+2))); err != nil {
			t.Fatal(err)
		}
	}
	web, onVLAN := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.20.50")
	for _, rs := range tp.RealServers() {
		holdVIPOnLoopback(t, web, rs)
		holdVIPOnLoopback(t, onVLAN, rs)
		// Replies to the VLAN's clients go to the client's eth0 address.
		if err := rs.AddRoute(netip.MustParsePrefix("10.0.20.0/24"), client.V4); err != nil {
			t.Fatal(err)
		}
	}
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RealServers()...)
	backends := fmt.Sprintf("backends:\n  - {address: %s}\n  - {address: %s}\n", tp.RS(1).V4, tp.RS(2).V4)
	startInterfaceDirectors(t, tp, map[string]string{
		"web":  fmt.Sprintf("service: web\nvip: %s\nports: [80]\n%s", web, backends),
		"vlan": fmt.Sprintf("service: vlan\nvip: %s\ninterface: %s\nports: [80]\n%s", onVLAN, vlan, backends),
	})
	devs := []string{"eth0", vlan}
	placed := func(webOn, vlanOn *topo.Host) string {
		var parts []string
		for _, d := range []*topo.Host{d1, d2} {
			var on []string
			if webOn == d {
				on = append(on, web.String()+"@eth0")
			}
			if vlanOn == d {
				on = append(on, onVLAN.String()+"@"+vlan)
			}
			if len(on) == 0 {
				on = []string{"none"}
			}
			parts = append(parts, d.ID+": "+strings.Join(on, " "))
		}
		return strings.Join(parts, "; ")
	}
	waitPlacement(t, tp, devs, placed(d1, d1), 30*time.Second, web, onVLAN)
	garp0, garp20 := captureGARP(t, client, client.Link), captureGARP(t, client, vlan)
	askBoth := func(when string) {
		t.Helper()
		for _, v := range []netip.Addr{web, onVLAN} {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			_, err := echo.Ask(ctx, client, netip.Addr{}, netip.AddrPortFrom(v, 80), echo.TCP)
			cancel()
			if err != nil {
				t.Fatalf("%s: %s:80 does not answer: %v", when, v, err)
			}
		}
	}
	askBoth("at start")

	moves := []struct {
		what          string
		webOn, vlanOn *topo.Host
		change        func() error
	}{
		{"owner's port cut", d2, d2, func() error { return d1.SetPort(false) }},
		{"owner's port back", d1, d1, func() error { return d1.SetPort(true) }},
		{"owner's " + vlan + " down", d1, d2, func() error { return d1.SetLink(vlan, false) }},
		{"owner's " + vlan + " up", d1, d1, func() error { return d1.SetLink(vlan, true) }},
	}
	var report []string
	for _, m := range moves {
		time.Sleep(time.Second)
		at := time.Now()
		webWas := placement(t, tp, []string{"eth0"}, web)
		if err := m.change(); err != nil {
			t.Fatal(err)
		}
		took := waitPlacement(t, tp, devs, placed(m.webOn, m.vlanOn), 30*time.Second, web, onVLAN)
		garp20.waitFrom(t, m.what, onVLAN, m.vlanOn.MAC, at, 5*time.Second)
		waitNeighbourOn(t, client, vlan, onVLAN, m.vlanOn.MAC, 5*time.Second)
		if placement(t, tp, []string{"eth0"}, web) != webWas {
			garp0.waitFrom(t, m.what, web, m.webOn.MAC, at, 5*time.Second)
			waitNeighbourOn(t, client, client.Link, web, m.webOn.MAC, 5*time.Second)
		}
		askBoth(m.what)
		report = append(report, fmt.Sprintf("%s: %s on %s, %s on %s after %v", m.what, web, m.webOn.ID, onVLAN, m.vlanOn.ID,
			took.Round(time.Millisecond)))
	}
	// A packet socket on eth0 also sees VLAN 20's frames (untagged by the
	// kernel before delivery), one on eth0.20 only VLAN 20's: the eth0
	// VIP's announcements must never be among them.
	if garp20.any(web, time.Time{}, func(garpSeen) bool { return true }) {
		t.Errorf("a gratuitous ARP for %s arrived on the client's %s: %v", web, vlan, garp20.all())
	}
	t.Logf("VIPs on two interfaces:\n%s\ngratuitous ARPs on eth0: %d, on %s: %d", strings.Join(report, "\n"),
		len(garp0.all()), vlan, len(garp20.all()))
}
