//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// gapReps is how many times each contender's owner is cut.
const gapReps = 3

// TestFailoverGap: the client opens a new connection to the VIP every
// 50 ms; the VIP owner's switch port is cut; the gap is the time between
// the last success before and the first success after. Measured for lvsd
// (default timers) and, in the same run and topology, for keepalived 2.2.7
// VRRPv3 with advert_int 1 and 0.1 (the IPVS tables lvsd programmed stay
// in place for it). After every move the client's neighbour entry for the
// VIP must point at the new owner.
func TestFailoverGap(t *testing.T) {
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Fatalf("keepalived is not installed (e2e/vm/run --setup installs it): %v", err)
	}
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	ds := startRankedDirectors(t, tp, vip)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	p := startProber(t, tp.Client(), netip.AddrPortFrom(vip, 80), 50*time.Millisecond)
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)

	results := map[string][]time.Duration{}
	results["lvsd"] = measureGaps(t, tp, p, vip, "lvsd")

	// keepalived next: stop lvsd (it releases the VIP; IPVS stays).
	for _, l := range ds {
		l.stop()
	}
	waitHolders(t, tp, vip, 10*time.Second, func(h []string) bool { return len(h) == 0 })
	for _, adv := range []time.Duration{time.Second, 100 * time.Millisecond} {
		name := fmt.Sprintf("keepalived advert_int %g", adv.Seconds())
		stop := startKeepalived(t, tp, vip, adv)
		waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
		p.waitSuccessAfter(t, time.Now(), 10*time.Second)
		results[name] = measureGaps(t, tp, p, vip, name)
		stop()
		waitHolders(t, tp, vip, 10*time.Second, func(h []string) bool { return len(h) == 0 })
	}

	summary := gapSummary(results)
	t.Log("failover gaps (min / median / max of " + fmt.Sprint(gapReps) + "):\n" + summary)
	if outDir != "" {
		_ = os.WriteFile(filepath.Join(outDir, "failover-gap.txt"), []byte(summary), 0o644)
	}
	lv, ka1, ka01 := median(results["lvsd"]), median(results["keepalived advert_int 1"]), median(results["keepalived advert_int 0.1"])
	if lv >= time.Second {
		t.Errorf("lvsd median gap %v, want < 1s", lv)
	}
	if 3*lv > ka1 {
		t.Errorf("lvsd median gap %v is more than a third of keepalived advert_int 1 (%v)", lv, ka1)
	}
	if lv > ka01 {
		t.Logf("goal missed: lvsd median gap %v > keepalived advert_int 0.1 (%v)", lv, ka01)
	}
}

// measureGaps cuts the owner's port gapReps times, each time measuring
// the gap and checking the client's neighbour entry, then restores the
// port. Each cut starts from the same state: the VIP settled on director
// (the highest priority: both lvsd and keepalived preempt, keepalived only
// after its master-down interval, since a director whose link went down
// restarts as backup).
func measureGaps(t *testing.T, tp *topo.Topology, p *prober, vip netip.Addr, who string) []time.Duration {
	return measureGapsN(t, tp, p, vip, who, gapReps)
}

// measureGapsN is measureGaps with reps cuts.
func measureGapsN(t *testing.T, tp *topo.Topology, p *prober, vip netip.Addr, who string, reps int) []time.Duration {
	t.Helper()
	var gaps []time.Duration
	for rep := range reps {
		if s := settle(t, tp, vip, 2*time.Second, 30*time.Second); s != "director" {
			waitHolders(t, tp, vip, 20*time.Second, onlyOn("director"))
			settle(t, tp, vip, 2*time.Second, 30*time.Second)
		}
		owner := tp.Director(1)
		cut := time.Now()
		if err := owner.SetPort(false); err != nil {
			t.Fatal(err)
		}
		// The cut owner may keep the VIP (keepalived does: it is master of
		// its own little world); the others must have one new owner.
		moved := waitHolders(t, tp, vip, 10*time.Second, func(h []string) bool {
			return len(slices.DeleteFunc(slices.Clone(h), func(id string) bool { return id == owner.ID })) == 1
		})
		next := tp.Host(slices.DeleteFunc(moved, func(id string) bool { return id == owner.ID })[0])
		p.waitSuccessAfter(t, time.Now(), 10*time.Second)
		time.Sleep(time.Second)
		gap := p.gap(cut.Add(-500*time.Millisecond), time.Now())
		gaps = append(gaps, gap)
		t.Logf("%s, cut %d: %s -> %s, gap %v", who, rep+1, owner.ID, next.ID, gap.Round(time.Millisecond))
		checkNeighbour(t, tp.Client(), next, vip, 2*time.Second)

		if err := owner.SetPort(true); err != nil {
			t.Fatal(err)
		}
		restored := time.Now()
		waitHolders(t, tp, vip, 20*time.Second, onlyOn(owner.ID))
		back := time.Since(restored)
		settle(t, tp, vip, 2*time.Second, 20*time.Second)
		p.waitSuccessAfter(t, time.Now(), 10*time.Second)
		checkNeighbour(t, tp.Client(), owner, vip, 2*time.Second)
		t.Logf("%s: port of %s back, VIP back on it after %v, gap during the handback %v", who, owner.ID,
			back.Round(10*time.Millisecond), p.gap(restored, time.Now()).Round(time.Millisecond))
	}
	return gaps
}

// settle waits until vip has been on the same single director for hold.
func settle(t *testing.T, tp *topo.Topology, vip netip.Addr, hold, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	var since time.Time
	for time.Now().Before(deadline) {
		h := strings.Join(holders(t, tp, vip), "+")
		if h != last {
			last, since = h, time.Now()
		}
		if h != "" && !strings.Contains(h, "+") && time.Since(since) >= hold {
			return h
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not settle on one director within %v (now on %q)", vip, timeout, last)
	return ""
}

// startKeepalived runs keepalived (VRRPv3, VRRP only) on every director,
// priorities 150, 100, 50, and returns a function that stops them all
// (they remove the VIP when stopped).
func startKeepalived(t *testing.T, tp *topo.Topology, vip netip.Addr, advert time.Duration) func() {
	t.Helper()
	var stops []func()
	for i, d := range tp.Directors() {
		stops = append(stops, startVRRPKeepalived(t, d, vip, 150-50*i, advert))
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// gapSummary is a table of min / median / max per contender, with the
// ratio of lvsd's median to each.
func gapSummary(results map[string][]time.Duration) string {
	var b strings.Builder
	lv := median(results["lvsd"])
	for _, name := range []string{"lvsd", "keepalived advert_int 1", "keepalived advert_int 0.1"} {
		g := results[name]
		if len(g) == 0 {
			continue
		}
		ratio := ""
		if name != "lvsd" && median(g) > 0 {
			ratio = fmt.Sprintf("   lvsd/this = %.2f", float64(lv)/float64(median(g)))
		}
		fmt.Fprintf(&b, "%-26s %6.3f / %6.3f / %6.3f s%s\n", name, slices.Min(g).Seconds(), median(g).Seconds(),
			slices.Max(g).Seconds(), ratio)
	}
	return b.String()
}
