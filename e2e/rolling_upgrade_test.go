//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// needPrev fails the test unless `make prev` built the previous release.
func needPrev(t *testing.T) {
	t.Helper()
	if prevBin == "" {
		t.Fatalf("LVSD_PREV_BIN is not set: `make prev` builds the release before (%s) into bin/lvsd-prev, and `make e2e` passes it", prevCommit)
	}
	if _, err := os.Stat(prevBin); err != nil {
		t.Fatalf("LVSD_PREV_BIN: %v: `make prev` builds it from commit %s; a clone without that commit (shallow) must fetch it first (git fetch --unshallow)", err, prevCommit)
	}
}

// TestRollingUpgrade: two directors of the previous release, a DR and a
// FULLNAT service with connection sync, 200 long-lived connections on
// each, are upgraded one at a time to this build as an operator would:
// the standby first, then a failover both ways (the owner stops, the
// upgraded standby takes over; the owner starts and takes back), then the
// owner, then the same failover with both upgraded. Every connection must
// survive every step, and a VIP is never on both directors for longer
// than a failure timeout (a stopping director hands over).
//
// The previous release turns TCP window tracking off only under ECMP; a
// FULLNAT VIP that comes back to a director of that release finds entries
// that take the clients' next ACKs as invalid. docs/operations.md tells
// operators to set it by hand on those directors before the upgrade; the
// test does what it says.
func TestRollingUpgrade(t *testing.T) {
	needPrev(t)
	fdLimit(t, 4096)
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(4))
	all := survModes(tp)
	modes := []survMode{all[0], all[2]} // DR, FULLNAT
	setupSurvivalServers(t, tp, modes, survInterval)
	ds := survivalDirectors(t, tp, modes, true)
	for _, l := range ds {
		l.bin = prevBin
		l.start()
	}
	waitSurvivalDirectors(t, tp, modes, ds)
	for _, d := range tp.Directors() {
		if err := d.Sysctl("net/netfilter/nf_conntrack_tcp_be_liberal", "1"); err != nil {
			t.Fatal(err)
		}
	}
	owner, standby := tp.Director(1), tp.Director(2)
	var vips []netip.Addr
	for _, m := range modes {
		vips = append(vips, m.vip)
	}
	fleets := map[string]*fleet{}
	for _, m := range modes {
		f := newFleet(t, tp.Client(), m.src, m.vip, survEcho, survTick, survInterval)
		start := time.Now()
		if err := f.open(survOld+survYoung, false); err != nil {
			t.Fatal(err)
		}
		if broken, waiting := f.waitExchanged(start, 10*time.Second); len(broken) > 0 || waiting > 0 {
			t.Fatalf("%s: %d broke, %d did not exchange before the upgrade: %s", m.name, len(broken), waiting, strings.Join(broken, "\n"))
		}
		fleets[m.name] = f
	}
	tl := startTimeline(t, tp, vips)
	begin := time.Now()

	on := func(id string) func([]string) bool { return onlyOn(id) }
	settled := func(id string) {
		t.Helper()
		for _, v := range vips {
			waitHolders(t, tp, v, 30*time.Second, on(id))
		}
		time.Sleep(3 * time.Second) // the connections run a while where they are
	}
	restart := func(l *lvsd, bin string) {
		t.Helper()
		l.stop()
		l.bin = bin
		l.start()
	}
	var steps []string
	step := func(what string, f func()) {
		t.Helper()
		at := time.Now()
		f()
		steps = append(steps, fmt.Sprintf("%s: %v", what, time.Since(at).Round(time.Millisecond)))
	}
	step("standby upgraded", func() {
		restart(ds[1], "")
		ds[1].waitServices(2*len(modes), 2)
		settled(owner.ID)
	})
	step("old owner stopped, new standby took over", func() {
		ds[0].stop()
		settled(standby.ID)
	})
	step("old owner back, took over", func() {
		ds[0].start()
		settled(owner.ID)
	})
	step("owner upgraded (stopped: the standby took over; started: took back)", func() {
		restart(ds[0], "")
		settled(owner.ID)
	})
	step("new owner stopped, new standby took over", func() {
		ds[0].stop()
		settled(standby.ID)
	})
	step("new owner back, took over", func() {
		ds[0].start()
		settled(owner.ID)
	})
	end := time.Now()
	tl.close()
	t.Logf("steps: %s", strings.Join(steps, "; "))
	for _, m := range modes {
		f := fleets[m.name]
		f.stop(t, end)
		row := f.analyse(begin, end)
		t.Logf("%s: %d/%d survived the upgrade, longest stall %v\n%s", m.name, row.survived, row.total,
			row.longest.Round(time.Millisecond), strings.Join(row.failures, "\n"))
		if row.survived != row.total {
			t.Errorf("%s: %d of %d connections broke in the rolling upgrade", m.name, row.total-row.survived, row.total)
		}
		if d := tl.overlap[m.vip]; d > 250*time.Millisecond {
			t.Errorf("%s: %s was on both directors for %v, longer than a failure timeout:\n%s", m.name, m.vip, d, tl)
		}
	}
}
