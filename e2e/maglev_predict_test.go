//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/maglev"
	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// TestMaglevPrediction: agent/maglev names, from the kernel's live
// destination list, the real server the kernel's ip_vs_mh picks for each of
// 500 new flows per phase (source ports hashed: affinity none), as the kernel's
// connection table shows the choice, every time: as
// configured, after a weight change, and after a health change (a
// destination at weight 0 keeps its slots; mh-fallback rehashes its flows).
// This is what `lvsd explain` builds on.
func TestMaglevPrediction(t *testing.T) {
	tp, d, servers := startWeighted(t)
	vip, rss, k, key := weightedVIP, tp.RealServers(), d.ipvs(), weightedKey
	names := map[netip.Addr]string{}
	for _, rs := range rss {
		names[rs.V4] = rs.ID
	}
	// The kernel keeps a destination's last non-zero weight for its slots;
	// a netlink dump shows only the current one, so the test remembers.
	lastWeight := map[netip.Addr]int{}
	// A client port a flow of an earlier phase used may come again: IPVS
	// then reuses that flow's entry, still closing (DR sees no FIN of the
	// server's; conn_reuse_mode), and sends the new flow where the old one
	// went instead of scheduling it. Such flows say nothing of the table.
	used := map[netip.AddrPort]bool{}

	check := func(phase string, wantWeights map[string]int) {
		t.Helper()
		dests := waitWeights(t, k, key, rss, wantWeights)
		var mds []maglev.Destination
		var order []string
		for _, dst := range dests {
			if dst.Weight > 0 {
				lastWeight[dst.Addr] = dst.Weight
			}
			mds = append(mds, maglev.Destination{Addr: dst.Addr, Port: dst.Port, Weight: dst.Weight,
				LastWeight: lastWeight[dst.Addr]})
			order = append(order, fmt.Sprintf("%s w%d/%d", names[dst.Addr], dst.Weight, lastWeight[dst.Addr]))
		}
		table := maglev.New(mds)
		results := ask(t, tp.Client(), tp.ClientSources(false), netip.AddrPortFrom(vip, 80), echo.TCP, 500)
		conns, err := k.Connections(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// A health check that timed out under the load of the test would
		// have changed the table in the middle: the phase proves nothing.
		if now, err := k.Destinations(context.Background(), key); err != nil || !sameWeights(now, dests) {
			t.Fatalf("%s: the weights changed while the flows ran (%v): the phase proves nothing", phase, err)
		}
		chosen := map[netip.AddrPort]netip.Addr{} // the kernel's choice, from its connection table
		for _, c := range conns {
			if c.Virtual == netip.AddrPortFrom(vip, 80) {
				chosen[c.Client] = c.Dest.Addr()
			}
		}
		wrong, rehashed, elsewhere, reused := 0, 0, 0, 0
		defer func() {
			for _, r := range results {
				used[r.reply.Peer] = true
			}
		}()
		for _, r := range results {
			if r.err != nil {
				t.Fatalf("%s: %v", phase, r.err)
			}
			if used[r.reply.Peer] {
				reused++
				continue
			}
			dest, ok := chosen[r.reply.Peer]
			if !ok {
				t.Fatalf("%s: the director has no connection entry of %s (answered by %s)", phase, r.reply.Peer, r.reply.Name)
			}
			if names[dest] != r.reply.Name {
				elsewhere++ // IPVS chose dest, yet another server answered
				if elsewhere <= 5 {
					t.Logf("%s: IPVS sent %s to %s, %s answered", phase, r.reply.Peer, names[dest], r.reply.Name)
				}
			}
			c := table.Pick(r.reply.Peer.Addr(), r.reply.Peer.Port(), true)
			if c.Rehashed > 0 {
				rehashed++
			}
			if c.Dest < 0 || mds[c.Dest].Addr != dest {
				wrong++
				if wrong <= 5 {
					t.Errorf("%s: IPVS sent %s to %s, maglev predicted %+v", phase, r.reply.Peer, names[dest], c)
				}
			}
		}
		if elsewhere > 0 {
			t.Errorf("%s: %d flows were answered by another server than the one IPVS chose", phase, elsewhere)
		}
		if reused > len(results)/10 {
			t.Errorf("%s: %d of %d flows reused an earlier phase's client port: too few left to check", phase, reused, len(results))
		}
		t.Logf("%s: list %s, slots %v; %d flows (%d on an earlier phase's port, not checked), %d predicted as IPVS chose, "+
			"%d through mh-fallback; %s", phase, strings.Join(order, ", "), table.Slots(), len(results), reused,
			len(results)-reused-wrong, rehashed, formatDistribution(distribution(results)))
	}

	check("as configured", map[string]int{"rs1": 1, "rs2": 2, "rs3": 1, "rs4": 3})
	writeFile(t, d.dir+"/services.d/web.yaml", weightedService(vip, rss, 1, 2, 5, 3))
	d.barrier()
	check("rs3 weight 1 -> 5", map[string]int{"rs1": 1, "rs2": 2, "rs3": 5, "rs4": 3})
	servers["rs2"].SetHealthy(false)
	check("rs2 unhealthy", map[string]int{"rs1": 1, "rs2": 0, "rs3": 5, "rs4": 3})
}

// The service of TestMaglevPrediction and TestExplain.
var (
	weightedVIP = netip.MustParseAddr("10.0.0.50")
	weightedKey = ipvs.ServiceKey{Protocol: l4.TCP, Addr: weightedVIP, Port: 80}
)

// startWeighted starts a director with service web (weightedService) over
// four echo real servers at weights 1, 2, 1 and 3, and one client source.
func startWeighted(t *testing.T) (*topo.Topology, *lvsd, map[string]*echo.Server) {
	t.Helper()
	tp := topo.New(t, topo.WithRealServers(4), topo.WithClientSources(1))
	rss := tp.RealServers()
	holdVIPOnLoopback(t, weightedVIP, rss...)
	servers := serveEcho(t, echo.Config{TCP: []uint16{80}, HTTP: []uint16{8080}}, rss...)
	d := newDirector(t, tp.Director(1), map[string]string{"web": weightedService(weightedVIP, rss, 1, 2, 1, 3)})
	d.start()
	d.waitServices(1, 4)
	return tp, d, servers
}

// weightedService is a service web on vip with rss as backends at weights,
// http-checked on :8080.
func weightedService(vip netip.Addr, rss []*topo.Host, weights ...int) string {
	var b strings.Builder
	// A generous check: one that timed out under the test's load would
	// change the weights in the middle of a phase.
	fmt.Fprintf(&b, "service: web\nvip: %s\nports: [80]\nhealth:\n  interval: 2s\n  timeout: 1s\n  rise: 1\n  fall: 3\n"+
		"  checks: [{type: http, port: 8080, path: /healthz}]\nbackends:\n", vip)
	for i, rs := range rss {
		fmt.Fprintf(&b, "  - {address: %s, weight: %d}\n", rs.V4, weights[i])
	}
	return b.String()
}

// waitWeights waits until the kernel's destinations of key have the weights
// want (by real-server name) and returns them.
func waitWeights(t *testing.T, k *ipvs.Kernel, key ipvs.ServiceKey, rss []*topo.Host, want map[string]int) []ipvs.Destination {
	t.Helper()
	names := map[netip.Addr]string{}
	for _, rs := range rss {
		names[rs.V4] = rs.ID
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		dests, err := k.Destinations(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		ok := len(dests) == len(rss)
		for _, dst := range dests {
			ok = ok && dst.Weight == want[names[dst.Addr]]
		}
		if ok {
			return dests
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernel destinations %+v, want weights %v", dests, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sameWeights(a, b []ipvs.Destination) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].DestinationKey != b[i].DestinationKey || a[i].Weight != b[i].Weight {
			return false
		}
	}
	return true
}
