//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestTrackInterface: three directors whose cluster traffic runs over a
// network of its own; only the owner's client-facing link is cut. The
// cluster still hears the owner, so without interface tracking it would
// keep the VIP and the traffic it can no longer forward; with it the owner
// gives the VIP up and the next director takes it within the failover
// bound. When the link is back, the VIP returns (preempt).
//
// Then the upstream check (track: ping the client's network, here the
// client itself): the owner's pings are dropped on their way out, its link
// stays up; it gives the VIP up as well, and takes it back when the pings
// pass again.
func TestTrackInterface(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	clAddr := clusterNetwork(t, tp)
	key := clusterKey(t)
	var peers []string
	for _, d := range tp.Directors() {
		peers = append(peers, clAddr[d.ID].String())
	}
	var ds []*lvsd
	for i, d := range tp.Directors() {
		l := newClusterDirector(t, tp, d, key, fmt.Sprintf("  priority: %d\n", 250-50*i), vip)
		agentFile, err := os.ReadFile(l.config())
		if err != nil {
			t.Fatal(err)
		}
		y := strings.Replace(string(agentFile), "  bind: "+d.V4.String()+"\n", "  bind: "+clAddr[d.ID].String()+"\n", 1)
		y = y[:strings.Index(y, "  peers: [")] + "  peers: [" + strings.Join(peers, ", ") + "]" + y[strings.Index(y, "]\n")+1:]
		y += fmt.Sprintf("track: {address: %s, interval: 300ms, timeout: 250ms, rise: 2, fall: 2, checks: [{type: icmp}]}\n", tp.Client().V4)
		writeFile(t, l.config(), y)
		l.start()
		ds = append(ds, l)
	}
	owner, next := tp.Director(1), tp.Director(2)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn(owner.ID))
	settle(t, tp, vip, 2*time.Second, 30*time.Second)
	p := startProber(t, tp.Client(), netip.AddrPortFrom(vip, 80), 50*time.Millisecond)
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)

	mark := ds[0].logSize()
	cut := time.Now()
	if err := owner.SetPort(false); err != nil {
		t.Fatal(err)
	}
	waitHolders(t, tp, vip, 10*time.Second, onlyOn(next.ID))
	moved := time.Since(cut)
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	time.Sleep(time.Second)
	gap := p.gap(cut.Add(-500*time.Millisecond), time.Now())
	t.Logf("client link of %s cut: VIP on %s after %v, gap %v", owner.ID, next.ID, moved.Round(time.Millisecond), gap.Round(time.Millisecond))
	ds[0].waitLog(mark, 5*time.Second, "interface down: giving the VIPs up")
	if gap >= 2*time.Second {
		t.Errorf("the gap was %v: more than the failover bound", gap)
	}
	if n := countLines(ds[0].logSince(mark), "director failed"); n > 0 {
		t.Errorf("the cut director lost its peers (%d lines): the cluster network was cut too", n)
	}
	checkNeighbour(t, tp.Client(), next, vip, 2*time.Second)

	restored := time.Now()
	if err := owner.SetPort(true); err != nil {
		t.Fatal(err)
	}
	waitHolders(t, tp, vip, 20*time.Second, onlyOn(owner.ID))
	ds[0].waitLog(mark, 5*time.Second, "interface up: serving the VIPs again")
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	t.Logf("client link of %s back: VIP back after %v", owner.ID, time.Since(restored).Round(10*time.Millisecond))

	// The upstream check fails while the link stays up.
	mark = ds[0].logSize()
	blocked := time.Now()
	runInput(t, owner, fmt.Sprintf("table ip e2e_track {\n chain out {\n  type filter hook output priority 0;\n"+
		"  ip daddr %s icmp type echo-request drop\n }\n}\n", tp.Client().V4), "nft", "-f", "-")
	waitHolders(t, tp, vip, 10*time.Second, onlyOn(next.ID))
	t.Logf("pings of %s to the client dropped: VIP on %s after %v (track: 2 failed pings 300 ms apart)",
		owner.ID, next.ID, time.Since(blocked).Round(time.Millisecond))
	ds[0].waitLog(mark, 5*time.Second, "upstream check failing", "target=track/upstream")
	ds[0].waitLog(mark, 5*time.Second, "upstream check fails: giving the VIPs up")
	if strings.Contains(ds[0].logSince(mark), "interface down") {
		t.Error("the owner's interface went down: only its pings were to fail")
	}
	if out, _ := runLVSD(t, owner, "status", "--config", ds[0].config()); !strings.Contains(out, "serving NO VIP: upstream check failing") {
		t.Errorf("lvsd status on the owner does not say why it serves no VIP:\n%s", out)
	}
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	run(t, owner, "nft", "delete", "table", "ip", "e2e_track")
	waitHolders(t, tp, vip, 20*time.Second, onlyOn(owner.ID))
	ds[0].waitLog(mark, 5*time.Second, "upstream check passes: serving the VIPs again")
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
}

// clusterNetwork joins the directors of tp on a second bridge, 10.9.0.0/24,
// for their cluster traffic, and returns each one's address there.
func clusterNetwork(t *testing.T, tp *topo.Topology) map[string]netip.Addr {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := (*topo.Host)(nil).Exec(context.Background(), "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("link", "add", "lvsdcl", "type", "bridge")
	t.Cleanup(func() { _ = (*topo.Host)(nil).Exec(context.Background(), "ip", "link", "del", "lvsdcl").Run() })
	run("link", "set", "lvsdcl", "up")
	out := map[string]netip.Addr{}
	for i, d := range tp.Directors() {
		addr := netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)})
		port := fmt.Sprintf("lvsdcl%d", i+1)
		run("link", "add", port, "type", "veth", "peer", "name", "cl0", "netns", d.Name)
		run("link", "set", port, "master", "lvsdcl", "up")
		run("-n", d.Name, "addr", "add", addr.String()+"/24", "dev", "cl0")
		run("-n", d.Name, "link", "set", "cl0", "up")
		out[d.ID] = addr
	}
	return out
}
