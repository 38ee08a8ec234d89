//go:build e2e

package e2e

import (
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
)

// prevCommit is the release before wire version 4 (signed heartbeats and
// relay messages), which this build must keep working beside during a
// rolling upgrade.
const prevCommit = "98698e8"

// prevBin is that release's lvsd, built by `make prev`.
var prevBin = os.Getenv("LVSD_PREV_BIN")

// TestMixedVersions: director runs this build, director2 the release
// before (wire version 3 only), neither with cluster.directors. They hear
// each other: one holds the VIP; it fails over from the new to the old
// build when the new one is killed, and back when it returns; connection
// sync flows both ways (v3 relay messages); the old build's warning about
// the new one's v4 heartbeats, sent until it is heard, is logged at most
// once.
func TestMixedVersions(t *testing.T) {
	needPrev(t)
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	key := clusterKey(t)
	nw, old := tp.Director(1), tp.Director(2)
	// Two of the topology's three directors run: quorum 1, or the survivor of a kill holds nothing.
	lNew := newClusterDirector(t, tp, nw, key, "  priority: 250\n  quorum: 1\n", vip)
	lOld := newClusterDirector(t, tp, old, key, "  priority: 200\n  quorum: 1\n", vip)
	lOld.bin = prevBin
	lOld.start()
	lNew.start()
	waitHolders(t, tp, vip, 30*time.Second, onlyOn(nw.ID))
	tl := startTimeline(t, tp, []netip.Addr{vip})
	// Connections to the VIP, which the holder's relay sends the other.
	p := startProber(t, tp.Client(), netip.AddrPortFrom(vip, 80), 200*time.Millisecond)
	time.Sleep(3 * time.Second)
	if moved := tl.firstAfter(vip, time.Now().Add(-3*time.Second), func(h []string) bool { return !slices.Equal(h, []string{nw.ID}) }); !moved.IsZero() {
		t.Fatalf("the VIP did not stay on %s:\n%s", nw.ID, tl)
	}
	v := statusPart[cluster.View](t, nw, "cluster")
	for _, m := range v.Members {
		if m.Name == old.ID && (!m.Live || m.WireVersion != 3) {
			t.Errorf("%s's view of the old build: %+v, want live at wire version 3", nw.ID, m)
		}
		if m.Name == old.ID && (m.Config == nil || m.Config.Match != cluster.ConfigUnknown) {
			t.Errorf("%s's view of the old build's configuration: %+v, want unknown (it sends no digest), never different", nw.ID, m.Config)
		}
	}
	if v.Live != 2 {
		t.Errorf("%s counts %d live directors, want 2", nw.ID, v.Live)
	}

	// New → old: the new build is killed.
	killed := time.Now()
	if err := lNew.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-lNew.exited
	waitHolders(t, tp, vip, 15*time.Second, func(h []string) bool { return slices.Contains(h, old.ID) })
	t.Logf("the old build took the VIP over %v after the new one was killed", time.Since(killed).Round(time.Millisecond))
	// The killed director's address lingers until its lifetime ends
	// (address_lifetime, docs/cluster.md): then the old build is the only
	// holder.
	waitHolders(t, tp, vip, 15*time.Second, onlyOn(old.ID))
	tl.close()

	// Old → new: the new build returns and takes it back (preempt), by a
	// handover: never on both.
	tl = startTimeline(t, tp, []netip.Addr{vip})
	back := time.Now()
	lNew.start()
	waitHolders(t, tp, vip, 30*time.Second, onlyOn(nw.ID))
	t.Logf("the new build took the VIP back %v after it restarted", time.Since(back).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // the new holder's connections reach the old build
	p.close()
	tl.close()
	if d := tl.overlap[vip]; d > 0 {
		t.Errorf("the VIP was on both directors for %v during the handover back:\n%s", d, tl)
	}
	for _, h := range []struct {
		id   string
		l    *lvsd
		what string
	}{{nw.ID, lNew, "new"}, {old.ID, lOld, "old"}} {
		st := statusPart[connsync.Stats](t, h.l.host, "conn_sync")
		t.Logf("%s (%s build): relay received %d records, applied %d; %d invalid messages", h.id, h.what, st.ReceivedRecords, st.AppliedRecords, st.DroppedInvalid)
		if st.ReceivedRecords == 0 || st.DroppedInvalid != 0 {
			t.Errorf("the %s build received %d connection records from the other and %d invalid messages: connection sync does not cross versions",
				h.what, st.ReceivedRecords, st.DroppedInvalid)
		}
		if n := countLines(h.l.log(), "connection state of the other directors received"); n == 0 {
			t.Errorf("the %s build never received the other's replay", h.what)
		}
	}
	warned := countLines(lOld.log(), "level=WARN", "heartbeat of version 4")
	t.Logf("the old build warned %d times about the new one's v4 heartbeats, and dropped %d of them in all",
		warned, countLines(lOld.log(), "heartbeat of version 4"))
	if warned > 1 {
		t.Errorf("the old build warned %d times about v4 heartbeats, want at most once (rate limited)", warned)
	}
}
