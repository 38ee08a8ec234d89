//go:build e2e && dpbench

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/ecmplab"
	"github.com/lvsd/lvsd/e2e/topo"
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
		frr     bool // FRR and ipvsadm on the directors instead of lvsd
	}{{"DR", false, false}, {"FULLNAT", true, false}, {"FRR+ipvsadm", false, true}} {
		t.Run(mode.name, func(t *testing.T) {
			l := newECMPLab(t, ecmpOptions{directors: 3, sources: 0, sync: true, fullnat: mode.fullnat, bfdInterval: interval})
			if err := l.tp.Client().Sysctl("net/core/txrehash", "0"); err != nil {
				t.Fatalf("net.core.txrehash: %v", err)
			}
			if mode.frr {
				l.startFRRDirectors(t, interval)
			} else {
				l.start("director", "director2", "director3")
			}
			before := falseDrops(t, l, "director2")
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
			drops := falseDrops(t, l, "director2") - before
			row := fmt.Sprintf("%-8s BFD %v × 3: router dropped the lost path after %s; new connections: %d of %d slow or failed, %d failed after the route change; false BFD drops on the survivors: %d",
				mode.name, interval, summarize(routed), slow, probes, failed, drops)
			t.Log(row)
			rows = append(rows, row)
		})
	}
	t.Logf("ECMP director loss with fast BFD (%d cuts each, kernel %s):\n%s", cuts, kernelRelease(), strings.Join(rows, "\n"))
}

// falseDrops counts the router's BFD sessions that went down, with every
// director but except (the one the test cuts): whichever speaks BFD on
// the directors, the router is where a false drop takes a path away.
func falseDrops(t *testing.T, l *ecmpLab, except string) int {
	t.Helper()
	out, err := l.frr.Vtysh(t.Context(), "show bfd peers counters json")
	if err != nil {
		t.Fatalf("router: show bfd peers counters: %v", err)
	}
	var peers []struct {
		Peer string `json:"peer"`
		Down int    `json:"session-down"`
	}
	if err := json.Unmarshal([]byte(out), &peers); err != nil {
		t.Fatalf("router: show bfd peers counters: %v: %s", err, out)
	}
	skip := ""
	for _, d := range l.tp.Directors() {
		if d.ID == except {
			skip = d.V4.String()
		}
	}
	n := 0
	for _, p := range peers {
		if p.Peer != skip {
			n += p.Down
		}
	}
	return n
}

// startFRRDirectors makes each director of l what a site without lvsd
// runs: the VIP on lo, the lab's DR services programmed with ipvsadm
// (Maglev, backends in the same order everywhere, sloppy_tcp so that a
// director picks up a flow from its next packet, as lvsd sets it under
// ECMP) and FRR's bgpd and bfdd announcing the VIP with BFD at interval
// × 3; and waits until the router has a path through each.
func (l *ecmpLab) startFRRDirectors(t *testing.T, interval time.Duration) {
	t.Helper()
	vip := netip.PrefixFrom(ecmpVIP, 32)
	for _, d := range l.tp.Directors() {
		if err := d.AddAddr(vip, "lo"); err != nil {
			t.Fatal(err)
		}
		if err := d.Sysctl("net/ipv4/vs/sloppy_tcp", "1"); err != nil {
			t.Fatal(err)
		}
		for _, port := range []uint16{80, survEcho, survTick} {
			svc := netip.AddrPortFrom(ecmpVIP, port).String()
			run(t, d, "ipvsadm", "-A", "-t", svc, "-s", "mh")
			for _, rs := range []*topo.Host{l.tp.RS(1), l.tp.RS(2)} {
				run(t, d, "ipvsadm", "-a", "-t", svc, "-r", netip.AddrPortFrom(rs.V4, port).String(), "-g", "-w", "1")
			}
		}
		ms := fmt.Sprint(interval.Milliseconds())
		config := strings.NewReplacer("receive-interval 100\n", "receive-interval "+ms+"\n",
			"transmit-interval 100\n", "transmit-interval "+ms+"\n").Replace(ecmplab.DirectorFRRConfig(d.V4, l.tp.Router().V4, vip))
		ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
		f, err := d.StartFRR(ctx, config)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Stop() })
	}
	l.waitPaths(3, 60*time.Second)
}

// summarize is min / median / max of ds.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%v / %v / %v", slices.Min(ds).Round(time.Millisecond), median(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}
