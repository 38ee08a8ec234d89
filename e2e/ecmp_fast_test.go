//go:build e2e && dpbench

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestECMPFastFailover: the director loss of TestECMP and TestECMPFullNAT
// with the BFD timers docs/ecmp.md recommends (100 ms × 3) instead of the
// lab's 1 s × 3, measured (`make dpbench DPBENCH_RUN=TestECMPFastFailover`):
// for each cut, how long the router kept the lost director's path and how
// many new connections failed or needed a retransmitted SYN meanwhile,
// with connection sync on; and how often the surviving directors' BFD
// sessions went down without a cut (false drops), since one director's
// false drop takes a healthy path away. The client does not re-hash its
// flows on a retransmission (net.core.txrehash=0): it shares the router's
// kernel, which takes the socket's hash for the multipath choice, so with
// re-hashing a flow would leave a dead director by itself, which no real
// router does. LVSD_ECMP_FAST_CUTS (3) cuts per mode, LVSD_ECMP_FAST_MS
// (100) the BFD interval.
func TestECMPFastFailover(t *testing.T) {
	cuts := envInt("LVSD_ECMP_FAST_CUTS", 3)
	interval := time.Duration(envInt("LVSD_ECMP_FAST_MS", 100)) * time.Millisecond
	var rows []string
	for _, mode := range []struct {
		name    string
		fullnat bool
	}{{"DR", false}, {"FULLNAT", true}} {
		t.Run(mode.name, func(t *testing.T) {
			l := newECMPLab(t, ecmpOptions{directors: 3, sources: 0, sync: true, fullnat: mode.fullnat, bfdInterval: interval})
			if err := l.tp.Client().Sysctl("net/core/txrehash", "0"); err != nil {
				t.Fatalf("net.core.txrehash: %v", err)
			}
			l.start("director", "director2", "director3")
			before := falseDrops(l, "director2")
			var routed []time.Duration
			probes, slow, failed := 0, 0, 0
			for i := range cuts {
				cut, c := l.loseDirector(t, 2, fmt.Sprintf("%s, BFD %v × 3, cut %d of %d", mode.name, interval, i+1, cuts))
				routed = append(routed, c.routed)
				probes, slow, failed = probes+c.probes, slow+c.slow, failed+len(c.failedAfter)
				if err := cut.SetPort(true); err != nil {
					t.Fatal(err)
				}
				l.waitPaths(3, 60*time.Second)
			}
			drops := falseDrops(l, "director2") - before
			row := fmt.Sprintf("%-8s BFD %v × 3: router dropped the lost path after %s; new connections: %d of %d slow or failed, %d failed after the route change; false BFD drops on the survivors: %d",
				mode.name, interval, summarize(routed), slow, probes, failed, drops)
			t.Log(row)
			rows = append(rows, row)
		})
	}
	t.Logf("ECMP director loss with fast BFD (%d cuts each, kernel %s):\n%s", cuts, kernelRelease(), strings.Join(rows, "\n"))
}

// falseDrops counts the BFD sessions that went down from up on every
// running director but the one the test cuts.
func falseDrops(l *ecmpLab, except string) int {
	n := 0
	for id, d := range l.ds {
		if id != except {
			n += strings.Count(d.log(), `msg="bfd session down"`)
		}
	}
	return n
}

// summarize is min / median / max of ds.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%v / %v / %v", slices.Min(ds).Round(time.Millisecond), median(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}
