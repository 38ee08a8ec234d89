//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// healthInterval is the check interval of the health tests: short, so the
// tests are quick, and well above the VM's scheduling noise.
const healthInterval = 300 * time.Millisecond

// backendsYAML lists hosts as backends, the ones in failover marked so.
func backendsYAML(hosts []*topo.Host, failover ...*topo.Host) string {
	var b strings.Builder
	for _, h := range hosts {
		f := ""
		for _, x := range failover {
			if x == h {
				f = ", failover: true"
			}
		}
		fmt.Fprintf(&b, "  - {address: %s%s}\n", h.V4, f)
	}
	return b.String()
}

// newConnectionsGoTo opens n new connections from distinct sources and
// returns how many each server answered (errors under "error").
func newConnectionsGoTo(t *testing.T, tp *topo.Topology, vip netip.Addr, n int) map[string]int {
	t.Helper()
	sources := tp.ClientSources(false)
	if n < len(sources) {
		sources = sources[:n]
	}
	return distribution(ask(t, tp.Client(), sources, netip.AddrPortFrom(vip, 80), echo.TCP, (n+len(sources)-1)/len(sources)))
}

// connectTo opens a long-lived connection through dst that lands on the
// named server, trying one client source after another.
func connectTo(t *testing.T, tp *topo.Topology, dst netip.AddrPort, server string) *echo.Conn {
	t.Helper()
	for _, src := range tp.ClientSources(false) {
		c, err := echo.Connect(context.Background(), tp.Client(), src, dst)
		if err != nil {
			t.Fatal(err)
		}
		if c.Hello.Name == server {
			t.Cleanup(func() { c.Close() })
			return c
		}
		c.Close()
	}
	t.Fatalf("no connection through %s reached %s", dst, server)
	return nil
}

// waitFor polls cond every 100 ms until it holds or timeout passes, and
// returns how long it took.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	if !eventually(timeout, cond) {
		t.Fatalf("%s: not within %v", what, timeout)
	}
	return time.Since(start)
}

// eventually polls cond every 100 ms and reports whether it held within
// timeout.
func eventually(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// TestHealthFailRise: when rs1's health endpoint fails, after `fall`
// intervals no new connection reaches rs1 while an established connection to
// rs1 keeps working; when it comes back, after `rise` intervals it gets new
// connections again.
func TestHealthFailRise(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(24))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	servers := serveEcho(t, echo.Config{TCP: []uint16{80}, HTTP: []uint16{8080}}, rs1, rs2)
	d := newDirector(t, tp.Director(1), map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [80]\nhealth:\n  interval: %s\n  timeout: 250ms\n  rise: 2\n  fall: 2\n  checks: [{type: http, port: 8080, path: /healthz}]\nbackends:\n%s",
		vip, healthInterval, backendsYAML([]*topo.Host{rs1, rs2}))})
	d.start()
	d.waitServices(1, 2)

	// An established connection to rs1, found among a few tries.
	conn := connectTo(t, tp, netip.AddrPortFrom(vip, 80), "rs1")

	// Checks start jittered over an interval and the first round decides
	// at once: fail rs1 only once it has been seen healthy.
	waitFor(t, 5*time.Second, "rs1's first health round", func() bool {
		return strings.Contains(d.log(), "target=web/10.0.0.11 healthy=true")
	})
	servers["rs1"].SetHealthy(false)
	took := waitFor(t, 10*time.Second, "rs1 out of rotation", func() bool {
		return newConnectionsGoTo(t, tp, vip, 24)["rs1"] == 0
	})
	t.Logf("rs1 out of rotation %v after its health endpoint failed (fall 2 × %v)", took.Round(10*time.Millisecond), healthInterval)
	// Two failing rounds one interval apart: never sooner than one interval.
	if took < healthInterval {
		t.Errorf("rs1 left after %v, before fall (2) rounds could have failed", took)
	}
	if dist := newConnectionsGoTo(t, tp, vip, 24); dist["rs1"] != 0 || dist["error"] != 0 {
		t.Errorf("with rs1 unhealthy new connections went %s, want all to rs2", formatDistribution(dist))
	}
	if err := conn.Echo(context.Background(), "still there"); err != nil {
		t.Errorf("the established connection to rs1 broke when rs1 became unhealthy: %v", err)
	}

	servers["rs1"].SetHealthy(true)
	took = waitFor(t, 10*time.Second, "rs1 back in rotation", func() bool { return newConnectionsGoTo(t, tp, vip, 24)["rs1"] > 0 })
	t.Logf("rs1 back %v after its health endpoint recovered (rise 2 × %v)", took.Round(10*time.Millisecond), healthInterval)
	if err := conn.Echo(context.Background(), "and still"); err != nil {
		t.Errorf("the established connection to rs1 broke: %v", err)
	}
	if !strings.Contains(d.log(), `event=health`) {
		t.Errorf("no health transition in the log:\n%s", d.log())
	}
}

// TestHeaderWeights: real servers (lvsd in role realserver) report weights
// 1 and 4 in X-Load-Balancing-Endpoint-Weight; new connections split about
// 20/80. When rs2 reports 0, new connections avoid it and its established
// one goes on.
func TestHeaderWeights(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(100))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	block := func(w int) string {
		return fmt.Sprintf("  vips: [%s]\n  weight: %d\n  health: {listen: \":8080\"}\n", vip, w)
	}
	startRealServers(t, block(1), rs1)
	r2 := startRealServers(t, block(4), rs2)[0]
	d := newDirector(t, tp.Director(1), map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [80]\nhealth:\n  interval: %s\n  timeout: 250ms\n  rise: 1\n  fall: 1\n  weight_header: true\n  checks: [{type: http, port: 8080, path: /healthz}]\nbackends:\n%s",
		vip, healthInterval, backendsYAML([]*topo.Host{rs1, rs2}))})
	d.start()
	d.waitServices(1, 2)
	waitFor(t, 10*time.Second, "weights 1 and 4 in the kernel", func() bool {
		save := ipvsSave(t, tp.Director(1))
		return strings.Contains(save, "-r 10.0.0.11:80 -g -w 1") && strings.Contains(save, "-r 10.0.0.12:80 -g -w 4")
	})

	// affinity none: every connection hashes on its own (source port included).
	dist := newConnectionsGoTo(t, tp, vip, 400)
	share := float64(dist["rs1"]) / float64(dist["rs1"]+dist["rs2"])
	t.Logf("400 new connections: %s; rs1 share %.1f%% (weights 1:4 → 20%%; asserted 13–27%%)", formatDistribution(dist), share*100)
	if dist["error"] > 0 || share < 0.13 || share > 0.27 {
		t.Errorf("split %s (rs1 %.1f%%), want about 20/80 within 13–27%% for rs1", formatDistribution(dist), share*100)
	}

	conn := connectTo(t, tp, netip.AddrPortFrom(vip, 80), "rs2")
	if out, code := runLVSD(t, rs2, "drain", "--config", r2.config()); code != 0 {
		t.Fatalf("lvsd drain on rs2: %s", out)
	}
	waitFor(t, 10*time.Second, "rs2 at weight 0", func() bool {
		return strings.Contains(ipvsSave(t, tp.Director(1)), "-r 10.0.0.12:80 -g -w 0")
	})
	if dist := newConnectionsGoTo(t, tp, vip, 100); dist["rs2"] != 0 || dist["error"] != 0 {
		t.Errorf("rs2 reports weight 0, yet new connections went %s", formatDistribution(dist))
	}
	if err := conn.Echo(context.Background(), "weight 0 keeps me"); err != nil {
		t.Errorf("the established connection to rs2 broke at weight 0: %v", err)
	}
}

// TestFailoverPool: failover ratio 0.5, three primaries and two failover
// backends. Two primaries fail (1/3 < 0.5) → new connections go to the
// failover pool; they recover → back to the primaries. With
// drop_if_none_healthy and everything unhealthy, new connections fail fast.
func TestFailoverPool(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(24), topo.WithRealServers(5))
	vip := netip.MustParseAddr("10.0.0.50")
	rss := tp.RealServers()
	holdVIPOnLoopback(t, vip, rss...)
	servers := serveEcho(t, echo.Config{TCP: []uint16{80}, HTTP: []uint16{8080}}, rss...)
	svc := func(drop bool) string {
		return fmt.Sprintf("service: web\nvip: %s\nports: [80]\naffinity: client-ip\nfailover: {ratio: 0.5, drop_if_none_healthy: %v}\nhealth:\n  interval: %s\n  timeout: 250ms\n  rise: 1\n  fall: 1\n  checks: [{type: http, port: 8080, path: /healthz}]\nbackends:\n%s",
			vip, drop, healthInterval, backendsYAML(rss, rss[3], rss[4]))
	}
	d := newDirectorOnTmpfs(t, tp.Director(1), map[string]string{"web": svc(false)})
	d.start()
	d.waitServices(1, 5)
	primaries := func(dist map[string]int) int { return dist["rs1"] + dist["rs2"] + dist["rs3"] }
	failovers := func(dist map[string]int) int { return dist["rs4"] + dist["rs5"] }

	dist := newConnectionsGoTo(t, tp, vip, 24)
	t.Logf("all healthy: %s", formatDistribution(dist))
	if failovers(dist) != 0 || primaries(dist) != 24 {
		t.Errorf("all healthy: %s, want only primaries", formatDistribution(dist))
	}
	servers["rs1"].SetHealthy(false)
	servers["rs2"].SetHealthy(false)
	waitFor(t, 10*time.Second, "failover to the failover pool", func() bool {
		dist = newConnectionsGoTo(t, tp, vip, 24)
		return primaries(dist) == 0 && failovers(dist) == 24
	})
	t.Logf("2 of 3 primaries down (1/3 < ratio 0.5): %s", formatDistribution(dist))
	servers["rs1"].SetHealthy(true)
	servers["rs2"].SetHealthy(true)
	waitFor(t, 10*time.Second, "failback to the primaries", func() bool {
		dist = newConnectionsGoTo(t, tp, vip, 24)
		return failovers(dist) == 0 && primaries(dist) == 24
	})
	t.Logf("primaries back: %s", formatDistribution(dist))

	// Nothing healthy, drop_if_none_healthy: refused at once (IPVS answers
	// ICMP port unreachable when no destination is available), no hang.
	writeAtomic(t, d.dir+"/services.d/web.yaml", svc(true))
	d.barrier()
	for _, s := range servers {
		s.SetHealthy(false)
	}
	// Every destination at weight 0 for two check intervals: a pass that
	// moves from the primaries to the failover pool sets the primaries to 0
	// before the failover backends to 1, and a read between the two would
	// see all five at 0 for a moment.
	allZero := func() bool { return strings.Count(ipvsSave(t, tp.Director(1)), " -w 0") == 5 }
	waitFor(t, 10*time.Second, "every destination at weight 0", func() bool {
		if !allZero() {
			return false
		}
		time.Sleep(2 * healthInterval)
		return allZero()
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := echo.Ask(ctx, tp.Client(), tp.ClientSources(false)[0], netip.AddrPortFrom(vip, 80), echo.TCP)
	took := time.Since(start)
	t.Logf("nothing healthy, drop_if_none_healthy: %v after %v", err, took.Round(time.Millisecond))
	if err == nil || took > time.Second {
		t.Errorf("a new connection with nothing healthy: err %v after %v, want a fast failure", err, took)
	}
}

// TestActiveDrain: `lvsd drain` on a real server takes it out of rotation
// for new connections within one check interval of the director; its
// established connection goes on.
func TestActiveDrain(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(24))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	block := fmt.Sprintf("  vips: [%s]\n  weight: 1\n  health: {listen: \":8080\"}\n", vip)
	r := startRealServers(t, block, rs1, rs2)
	d := newDirector(t, tp.Director(1), map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [80]\nhealth:\n  interval: %s\n  timeout: 250ms\n  rise: 1\n  fall: 1\n  weight_header: true\n  checks: [{type: http, port: 8080, path: /healthz}]\nbackends:\n%s",
		vip, healthInterval, backendsYAML([]*topo.Host{rs1, rs2}))})
	d.start()
	d.waitServices(1, 2)
	conn := connectTo(t, tp, netip.AddrPortFrom(vip, 80), "rs1")

	start := time.Now()
	if out, code := runLVSD(t, rs1, "drain", "--config", r[0].config()); code != 0 {
		t.Fatalf("lvsd drain: %s", out)
	}
	took := waitFor(t, 5*time.Second, "rs1 out of rotation", func() bool {
		return strings.Contains(ipvsSave(t, tp.Director(1)), "-r 10.0.0.11:80 -g -w 0")
	})
	t.Logf("rs1 at weight 0 on the director %v after lvsd drain (interval %v)", (time.Since(start)).Round(10*time.Millisecond), healthInterval)
	if took > healthInterval+time.Second {
		t.Errorf("drain took %v, want within about one interval (%v)", took, healthInterval)
	}
	if dist := newConnectionsGoTo(t, tp, vip, 24); dist["rs1"] != 0 || dist["error"] != 0 {
		t.Errorf("after the drain new connections went %s, want none to rs1", formatDistribution(dist))
	}
	if err := conn.Echo(context.Background(), "drained, not cut"); err != nil {
		t.Errorf("the established connection to rs1 broke at the drain: %v", err)
	}
}
