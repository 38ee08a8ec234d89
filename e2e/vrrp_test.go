//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// vrrpAdvert is the advertisement interval of every router of
// TestVRRPMixedPair: keepalived's advert_int 0.1, lvsd's 100ms.
const vrrpAdvert = 100 * time.Millisecond

// TestVRRPMixedPair: two directors on one segment, a DR service on the VIP,
// a new connection from the client every 50 ms. The VIP's master stops
// and the other director takes over, for a pair of lvsd in mode vrrp, a
// pair of keepalived (VRRPv3, advert_int 0.1) and a mixed pair both ways:
// keepalived → lvsd, then, keepalived back with a lower priority (lvsd
// stays master), lvsd → keepalived. The VIP is sampled every 20 ms: in a
// handover with lvsd it is never on both directors for longer than one
// advertisement interval (keepalived's own pair is reported, not judged),
// and the gaps of the four handovers are reported side by side.
func TestVRRPMixedPair(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp, p, tl := vrrpSetup(t, vip)
	d1, d2 := tp.Director(1), tp.Director(2)
	key := clusterKey(t)
	var rows []handover

	// lvsd pair.
	l1, l2 := vrrpDirector(t, tp, d1, key, 150, vip), vrrpDirector(t, tp, d2, key, 100, vip)
	l1.start()
	waitHolders(t, tp, vip, 30*time.Second, onlyOn(d1.ID))
	l2.start()
	l2.waitServices(1, 2)
	waitVRRPStatus(t, d2, "backup", d1.Addr(false).String())
	rows = append(rows, handOver(t, tp, p, tl, vip, "lvsd → lvsd", l1.stop, d1, d2))
	if r := waitVRRPStatus(t, d2, "master", ""); r.BecameMaster != 1 {
		t.Errorf("lvsd status on %s: became master %d times, want 1", d2.ID, r.BecameMaster)
	}
	l2.stop()
	waitHolders(t, tp, vip, 10*time.Second, func(h []string) bool { return len(h) == 0 })

	// keepalived pair, on the IPVS service lvsd left (as keepalived's
	// virtual_server would program it).
	k1 := startVRRPKeepalived(t, d1, vip, 150, vrrpAdvert)
	k2 := startVRRPKeepalived(t, d2, vip, 100, vrrpAdvert)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn(d1.ID))
	rows = append(rows, handOver(t, tp, p, tl, vip, "keepalived → keepalived", k1, d1, d2))
	k2()
	waitHolders(t, tp, vip, 10*time.Second, func(h []string) bool { return len(h) == 0 })

	rows = append(rows, mixedPair(t, tp, p, tl, vip, key)...)
	reportHandovers(t, tl, rows, "vrrp-mixed-pair.txt")
}

// TestVRRPMixedPairIPv6 is the mixed pair of TestVRRPMixedPair over IPv6:
// advertisements to ff02::12 from the link-local addresses, the VIP moved
// with unsolicited neighbour advertisements.
func TestVRRPMixedPairIPv6(t *testing.T) {
	vip := netip.MustParseAddr("fd00::50")
	tp, p, tl := vrrpSetup(t, vip)
	// keepalived's director gets the service lvsd would program.
	svc := "[" + vip.String() + "]:80"
	runInput(t, tp.Director(1), fmt.Sprintf("-A -t %s -s rr\n-a -t %s -r [%s]:80 -g\n-a -t %s -r [%s]:80 -g\n",
		svc, svc, tp.RS(1).Addr(true), svc, tp.RS(2).Addr(true)), "ipvsadm", "-R")
	rows := mixedPair(t, tp, p, tl, vip, clusterKey(t))
	reportHandovers(t, tl, rows, "vrrp-mixed-pair-ipv6.txt")
}

// waitVRRPStatus waits until host's `lvsd status --json` shows its IPv4
// virtual router in state, naming master as the master ("": none), and
// logs the text status.
func waitVRRPStatus(t *testing.T, host *topo.Host, state, master string) views.VRRPRouterStatus {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		routers := statusPart[[]views.VRRPRouterStatus](t, host, "vrrp")
		if len(routers) == 1 && routers[0].Family == "ipv4" && routers[0].State == state && routers[0].Master == master {
			t.Logf("lvsd status on %s:\n%s", host.ID, statusText(t, host))
			return routers[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("lvsd status on %s: virtual routers %+v, want one of ipv4 in state %s with master %q", host.ID, routers, state, master)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// vrrpSetup builds two directors and two DR real servers serving vip:80,
// and starts the VIP's timeline and a new connection to it every 50 ms.
func vrrpSetup(t *testing.T, vip netip.Addr) (*topo.Topology, *prober, *timeline) {
	t.Helper()
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Fatalf("keepalived is not installed (e2e/vm/run --setup installs it): %v", err)
	}
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(0))
	holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2))
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	tl := startTimeline(t, tp, []netip.Addr{vip})
	p := startProber(t, tp.Client(), netip.AddrPortFrom(vip, 80), 50*time.Millisecond)
	return tp, p, tl
}

// mixedPair runs keepalived (priority 150) on the first director, on the
// IPVS service there, and lvsd (100) on the second; keepalived stops and
// lvsd takes over; keepalived comes back with priority 50 and must stay
// backup; lvsd stops and keepalived takes over.
func mixedPair(t *testing.T, tp *topo.Topology, p *prober, tl *timeline, vip netip.Addr, key string) []handover {
	t.Helper()
	d1, d2 := tp.Director(1), tp.Director(2)
	run(t, d2, "ipvsadm", "-C") // a new lvsd programs its own service
	k1 := startVRRPKeepalived(t, d1, vip, 150, vrrpAdvert)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn(d1.ID))
	l2 := vrrpDirector(t, tp, d2, key, 100, vip)
	l2.start()
	l2.waitServices(1, 2)
	if h := settle(t, tp, vip, 2*time.Second, 20*time.Second); h != d1.ID {
		t.Fatalf("lvsd (priority 100) took the VIP from keepalived (150): on %s", h)
	}
	rows := []handover{handOver(t, tp, p, tl, vip, "keepalived → lvsd", k1, d1, d2)}
	k1 = startVRRPKeepalived(t, d1, vip, 50, vrrpAdvert)
	// keepalived comes up as backup and must stay one: it hears lvsd's
	// advertisements, with the higher priority.
	if h := settle(t, tp, vip, 3*time.Second, 20*time.Second); h != d2.ID {
		t.Fatalf("keepalived (priority 50) took the VIP from lvsd (100): on %s", h)
	}
	rows = append(rows, handOver(t, tp, p, tl, vip, "lvsd → keepalived", l2.stop, d2, d1))
	k1()
	return rows
}

// reportHandovers logs the handovers side by side (and writes them to
// file in the output folder) and fails those with lvsd in which the VIP
// was on both directors for longer than one advertisement interval, or
// clients could not connect for long.
func reportHandovers(t *testing.T, tl *timeline, rows []handover, file string) {
	t.Helper()
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-24s gap %4d ms   VIP moved after %4d ms   on both for %3d ms\n", r.name,
			r.gap.Milliseconds(), r.moved.Milliseconds(), r.overlap.Milliseconds())
	}
	t.Logf("VRRP handovers (advert_int %v, a connection every 50 ms):\n%s", vrrpAdvert, b.String())
	t.Logf("VIP timeline:\n%s", tl)
	if outDir != "" {
		_ = os.WriteFile(filepath.Join(outDir, file), []byte(b.String()), 0o644)
	}
	for _, r := range rows {
		// keepalived's own pair is the reference: it sends priority 0
		// before it removes its VIP, and its successor may add it first.
		if r.name != "keepalived → keepalived" && r.overlap > vrrpAdvert {
			t.Errorf("%s: the VIP was on both directors for %v, more than one advertisement interval (%v)", r.name, r.overlap, vrrpAdvert)
		}
		if r.gap > 2*time.Second {
			t.Errorf("%s: clients could not connect for %v", r.name, r.gap)
		}
	}
}

// handover is one measured move of the VIP.
type handover struct {
	name    string
	gap     time.Duration // longest time without a successful new connection
	moved   time.Duration // from the stop to the VIP on the new master alone
	overlap time.Duration // longest time the VIP was on both directors
}

// handOver stops the master from (its VIP settled there) and measures
// the move to next.
func handOver(t *testing.T, tp *topo.Topology, p *prober, tl *timeline, vip netip.Addr, name string, stop func(), from, next *topo.Host) handover {
	t.Helper()
	// Settled for longer than the announcements after a takeover go on
	// (lvsd's and keepalived's last comes 5 s after it): a client ignores
	// an ARP update within a second (locktime) of the one before, so the
	// old master's last one would hide the new master's first.
	if h := settle(t, tp, vip, 6*time.Second, 30*time.Second); h != from.ID {
		t.Fatalf("%s: the VIP settled on %s, not %s", name, h, from.ID)
	}
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	tl.mark(name)
	cut := time.Now()
	stop()
	waitHolders(t, tp, vip, 10*time.Second, onlyOn(next.ID))
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	time.Sleep(time.Second)
	end := time.Now()
	h := handover{name: name, gap: p.gap(cut.Add(-500*time.Millisecond), end),
		moved:   tl.firstAfter(vip, cut, onlyOn(next.ID)).Sub(cut),
		overlap: tl.longestShared(vip, cut.Add(-time.Second), end)}
	t.Logf("%s: %s -> %s, gap %v, VIP on %s alone after %v, on both for %v", name, from.ID, next.ID,
		h.gap.Round(time.Millisecond), next.ID, h.moved.Round(time.Millisecond), h.overlap.Round(time.Millisecond))
	checkNeighbour(t, tp.Client(), next, vip, 2*time.Second)
	return h
}

// longestShared is the longest time vip was seen on more than one director
// between from and to, from the recorded changes.
func (tl *timeline) longestShared(vip netip.Addr, from, to time.Time) time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var longest time.Duration
	var since time.Time
	for _, c := range tl.changes {
		if c.vip != vip || c.at.After(to) {
			continue
		}
		switch {
		case len(c.holders) > 1 && since.IsZero():
			since = c.at
		case len(c.holders) <= 1 && !since.IsZero():
			if c.at.After(from) {
				longest = max(longest, c.at.Sub(since))
			}
			since = time.Time{}
		}
	}
	if !since.IsZero() {
		longest = max(longest, to.Sub(since))
	}
	return longest
}

// vrrpDirector writes host's agent file for mode vrrp with priority,
// virtual router 51 and advert_int 100ms: keepalived's instance below.
// The cluster block keeps the keys of lvsd's own cluster (bind, peers,
// key_file), as a director being migrated would, ready for the switch.
func vrrpDirector(t *testing.T, tp *topo.Topology, host *topo.Host, key string, priority int, vip netip.Addr) *lvsd {
	t.Helper()
	return newClusterDirector(t, tp, host, key, fmt.Sprintf(
		"  mode: vrrp\n  vrrp: {virtual_router_id: 51, priority: %d, advert_int: %s}\n", priority, vrrpAdvert), vip)
}
