//go:build e2e

package e2e

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestPlannedRestartKeepsVIP: two directors, the VIP on director (the
// higher priority), new connections at 25/s and ten long-lived ones.
// `lvsd restart-hold`, then a restart of director's lvsd: the VIP never
// leaves director (director2 never claims it, never announces it: the
// client's neighbour entry stays director's MAC all along), no new
// connection fails and every long-lived one still echoes. The control in
// the same test: a plain stop and start moves the VIP to director2 and
// back, as without the hold.
func TestPlannedRestartKeepsVIP(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(0))
	holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2))
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	ds := startRankedDirectors(t, tp, vip)
	a, b := ds[0], ds[1]
	b.waitLog(0, 30*time.Second, "start-up hold over")
	settle(t, tp, vip, 2*time.Second, 30*time.Second)
	waitHolders(t, tp, vip, 5*time.Second, onlyOn("director"))
	dst := netip.AddrPortFrom(vip, 80)
	client := tp.Client()

	long := make([]*echo.Conn, 10)
	for i := range long {
		c, err := echo.Connect(context.Background(), client, netip.Addr{}, dst)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		long[i] = c
	}
	p := startProber(t, client, dst, 40*time.Millisecond)
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	checkNeighbour(t, client, tp.Director(1), vip, 5*time.Second)
	macs := watchNeighbour(t, client, vip)
	tl := startTimeline(t, tp, []netip.Addr{vip})

	// The planned restart.
	offA, offB := a.logSize(), b.logSize()
	out, code := runLVSD(t, tp.Director(1), "restart-hold", "--config", filepath.Join(a.dir, "lvsd.yaml"), "--for", "20s")
	if code != 0 || !strings.Contains(out, "10.0.0.50") {
		t.Fatalf("lvsd restart-hold: exit %d\n%s", code, out)
	}
	t.Logf("lvsd restart-hold: %s", strings.TrimSpace(out))
	restarted := time.Now()
	tl.mark("restart of director's lvsd under the hold")
	a.stop()
	down := time.Since(restarted)
	a.start()
	a.waitLog(offA, 30*time.Second, "start-up hold over")
	back := time.Since(restarted)
	time.Sleep(3 * time.Second) // past the new process's first renewals and decisions
	end := time.Now()
	tl.mark("restart over")

	if tl.everOn(vip, "director2", restarted, end) {
		t.Errorf("director2 held the VIP during the planned restart")
	}
	if !slices.Equal(holders(t, tp, vip), []string{"director"}) || tl.firstAfter(vip, restarted, func(h []string) bool { return len(h) == 0 }) != (time.Time{}) {
		t.Errorf("the VIP left director during the planned restart")
	}
	logB := b.logSince(offB)
	for _, never := range []string{"taking VIP", "director failed"} {
		if k := countLines(logB, never); k > 0 {
			t.Errorf("director2 logged %q %d times during the planned restart", never, k)
		}
	}
	for _, want := range []string{"director about to restart", "director back from a planned restart"} {
		if countLines(logB, want) == 0 {
			t.Errorf("director2 did not log %q", want)
		}
	}
	if countLines(a.logSince(offA), "adopting the VIPs held before the restart") == 0 {
		t.Error("the restarted lvsd did not adopt the VIP")
	}
	if seen := macs.seen(); !slices.Equal(seen, []string{tp.Director(1).MAC.String()}) {
		t.Errorf("the client's neighbour entry for the VIP was %v, want director's MAC %s only", seen, tp.Director(1).MAC)
	}
	if answers := arpAnswers(t, client, vip, 500*time.Millisecond); !slices.Equal(answers, []string{tp.Director(1).MAC.String()}) {
		t.Errorf("ARP for the VIP answered by %v, want director alone", answers)
	}
	failed := p.failedBetween(restarted, end)
	gap := p.gap(restarted, end)
	if failed > 0 {
		t.Errorf("%d new connections failed during the planned restart", failed)
	}
	if gap > time.Second {
		t.Errorf("clients saw a gap of %v during the planned restart", gap)
	}
	for i, c := range long {
		if err := c.Echo(context.Background(), "after the planned restart"); err != nil {
			t.Errorf("long-lived connection %d broke: %v", i, err)
		}
	}
	t.Logf("planned restart: lvsd down after %v, back (start-up hold over) after %v; %d new connections, %d failed, longest gap %v; %d long-lived connections echo",
		down.Round(time.Millisecond), back.Round(time.Millisecond), p.okBetween(restarted, end), failed, gap.Round(time.Millisecond), len(long))
	macs.close()

	// The control: a plain stop moves the VIP to director2, the start
	// takes it back (preempt), as without the hold.
	offB = b.logSize()
	stopped := time.Now()
	tl.mark("plain stop of director's lvsd")
	a.stop()
	waitHolders(t, tp, vip, 5*time.Second, onlyOn("director2"))
	moved := time.Since(stopped)
	checkNeighbour(t, client, tp.Director(2), vip, 3*time.Second)
	a.start()
	waitHolders(t, tp, vip, 40*time.Second, onlyOn("director"))
	tl.close()
	t.Logf("timeline:\n%s", tl)
	if countLines(b.logSince(offB), "taking VIP") == 0 {
		t.Error("director2 did not take the VIP after a plain stop")
	}
	t.Logf("control: after a plain stop the VIP was on director2 %v later, and back on director after the start", moved.Round(time.Millisecond))
}

// failedBetween counts the connections started in [from, to] that failed.
func (p *prober) failedBetween(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := 0
	for _, at := range p.fails {
		if !at.Before(from) && !at.After(to) {
			k++
		}
	}
	return k
}

// okBetween counts the connections answered in [from, to].
func (p *prober) okBetween(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := 0
	for _, at := range p.ok {
		if !at.Before(from) && !at.After(to) {
			k++
		}
	}
	return k
}

// neighbourWatch records every MAC the client's neighbour entry for an
// address had, sampled every 20 ms.
type neighbourWatch struct {
	probeLoop
	mu   sync.Mutex
	macs []string
	errs []error
	t    *testing.T
}

func watchNeighbour(t *testing.T, h *topo.Host, ip netip.Addr) *neighbourWatch {
	t.Helper()
	w := &neighbourWatch{probeLoop: newProbeLoop(), t: t}
	w.every(20*time.Millisecond, func() {
		mac, err := neighbourMAC(h, ip)
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case err != nil:
			w.errs = append(w.errs, err)
		case mac != "" && !slices.Contains(w.macs, mac):
			w.macs = append(w.macs, mac)
		}
	})
	t.Cleanup(w.probeLoop.close)
	return w
}

// seen returns the MACs seen; a failed sample fails the test.
func (w *neighbourWatch) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		w.t.Errorf("reading the neighbour table failed %d times: %v", len(w.errs), w.errs[0])
	}
	return slices.Clone(w.macs)
}

// neighbourMAC is h's neighbour entry for ip on its link ("" without one).
func neighbourMAC(h *topo.Host, ip netip.Addr) (string, error) {
	var mac string
	err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Link)
		if err != nil {
			return err
		}
		neighs, err := netlink.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
		for _, n := range neighs {
			if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip && n.HardwareAddr != nil {
				mac = n.HardwareAddr.String()
			}
		}
		return err
	})
	return mac, err
}

// TestPlannedRestartBesideOldRelease: beside a director of the release
// before (wire version 3, which does not read the hold), `lvsd
// restart-hold` refuses, naming it, and holds nothing: a stop still hands
// the VIP over at once.
func TestPlannedRestartBesideOldRelease(t *testing.T) {
	if prevBin == "" {
		t.Fatalf("LVSD_PREV_BIN is not set: `make prev` builds the release before (%s) into bin/lvsd-prev", prevCommit)
	}
	vip := netip.MustParseAddr("10.0.0.50")
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(0))
	holdVIPOnLoopback(t, vip, tp.RS(1), tp.RS(2))
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	key := clusterKey(t)
	a := newClusterDirector(t, tp, tp.Director(1), key, "  priority: 250\n", vip)
	old := newClusterDirector(t, tp, tp.Director(2), key, "  priority: 200\n", vip)
	old.bin = prevBin
	old.start()
	a.start()
	old.waitLog(0, 30*time.Second, "start-up hold over")
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))

	out, code := runLVSD(t, tp.Director(1), "restart-hold", "--config", filepath.Join(a.dir, "lvsd.yaml"))
	if code == 0 || !strings.Contains(out, "without the restart hold") || !strings.Contains(out, "director2") {
		t.Fatalf("lvsd restart-hold beside the release before: exit %d, want a refusal naming director2:\n%s", code, out)
	}
	t.Logf("lvsd restart-hold refused: %s", strings.TrimSpace(out))
	stopped := time.Now()
	a.stop()
	waitHolders(t, tp, vip, 5*time.Second, onlyOn("director2"))
	t.Logf("after the stop the release before holds the VIP %v later, as without the hold", time.Since(stopped).Round(time.Millisecond))
	if countLines(a.log(), "stopping for a restart: keeping the VIPs") > 0 {
		t.Error("the stop kept the VIPs although the hold was refused")
	}
}
