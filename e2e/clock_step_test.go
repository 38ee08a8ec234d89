//go:build e2e

package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestClockStep: the directors share the VM's clock, which is stepped
// under them.
//
//   - An hour forward while both run: nothing changes. The owner keeps the
//     VIP, no director is declared failed: failure detection runs on the
//     monotonic clock.
//   - The standby stopped, the clock stepped two hours back (a host that
//     booted before its clock was set), the standby started again: its
//     incarnation, kept in state_dir, still grows, so the owner takes it as
//     a restart. Both see each other live within a few failure timeouts,
//     the VIP stays on the owner alone, and the owner refuses none of the
//     standby's connection-sync messages. (When the incarnation was the start
//     time, the owner refused the standby's heartbeats and relay messages as
//     replays of its previous process until the owner restarted itself, and
//     with quorum 1 both held the VIP.)
//   - Once more, an hour further back and without the incarnation record
//     (lost state): the incarnation is the clock, lower than the last one
//     the owner used, which takes it as soon as the previous process has
//     been silent for the failure timeout, here at once.
func TestClockStep(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	key := clusterKey(t)
	var ds []*lvsd
	for i, d := range tp.Directors()[:2] {
		// Two of the three directors, quorum 1: a standby that does not hear
		// the owner takes the VIP, so a lasting refusal shows as two holders.
		l := newClusterDirector(t, tp, d, key, "  quorum: 1\n  priority: "+[]string{"200", "100"}[i]+"\n", vip)
		l.start()
		ds = append(ds, l)
	}
	owner, standby := tp.Director(1), tp.Director(2)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn(owner.ID))
	waitSeesLive(t, owner, standby.ID, 10*time.Second)
	waitSeesLive(t, standby, owner.ID, 10*time.Second)
	settle(t, tp, vip, 2*time.Second, 20*time.Second)

	var stepped time.Duration
	t.Cleanup(func() { stepClock(t, -stepped) })

	// An hour forward, both running.
	tl := startTimeline(t, tp, []netip.Addr{vip})
	offs := []int{ds[0].logSize(), ds[1].logSize()}
	forward := time.Now()
	stepClock(t, time.Hour)
	stepped += time.Hour
	tl.mark("clock stepped an hour forward")
	time.Sleep(5 * time.Second)
	if tl.everOn(vip, standby.ID, forward, time.Now()) || !slices.Equal(holders(t, tp, vip), []string{owner.ID}) {
		t.Errorf("the VIP moved after the clock stepped forward:\n%s", tl)
	}
	for i, l := range ds {
		if k := countLines(l.logSince(offs[i]), "director failed"); k > 0 {
			t.Errorf("%s declared a director failed %d times after the clock stepped forward", l.host.ID, k)
		}
	}
	seesLive(t, owner, standby.ID, true)
	seesLive(t, standby, owner.ID, true)

	// The standby restarts two hours back.
	ds[1].stop()
	stepClock(t, -2*time.Hour)
	stepped -= 2 * time.Hour
	tl.mark("standby stopped, clock stepped two hours back")
	replayed := statusPart[connsync.Stats](t, owner, "conn_sync").DroppedReplayed
	ownerOff, standbyOff := ds[0].logSize(), ds[1].logSize()
	restarted := time.Now()
	ds[1].start()
	tl.mark("standby started")
	started, _ := lineTime(ds[1].waitLog(standbyOff, 30*time.Second, "cluster node started"))
	waitSeesLive(t, owner, standby.ID, 15*time.Second)
	waitSeesLive(t, standby, owner.ID, 5*time.Second)
	up, _ := lineTime(ds[0].waitLog(ownerOff, time.Second, "director up", "peer="+standby.ID))
	// The rise time (one failure timeout) and a few heartbeats, with room for a slow VM.
	took := up.Sub(started)
	t.Logf("the owner saw the restarted standby live %v after its cluster node started", took.Round(time.Millisecond))
	if limit := 8 * cluster.DefaultFailureTimeout; took > limit {
		t.Errorf("the owner saw the restarted standby live %v after its cluster node started, want within %v", took, limit)
	}
	if got := settle(t, tp, vip, 2*time.Second, 20*time.Second); got != owner.ID {
		t.Errorf("after the restart the VIP settled on %s, want %s", got, owner.ID)
	}
	if tl.everOn(vip, standby.ID, restarted, time.Now()) {
		t.Errorf("the restarted standby held the VIP:\n%s", tl)
	}
	// The restarted standby's relay replays its cache to the owner (empty:
	// it holds nothing) and ends the replay with a message the owner checks
	// like any other; one of an earlier incarnation would be refused.
	time.Sleep(3 * time.Second)
	if st := statusPart[connsync.Stats](t, owner, "conn_sync"); st.DroppedReplayed > replayed {
		t.Errorf("the owner refused %d relay messages as replayed after the standby restarted:\n%s", st.DroppedReplayed-replayed,
			ds[0].logSince(ownerOff))
	}

	// Again an hour further back, the incarnation record lost: the standby
	// starts with the clock as its incarnation, lower than the one the owner
	// used last. That one has been silent since the stop, longer than the
	// failure timeout, so the owner takes the new one at once.
	ds[1].stop()
	if err := os.Remove(filepath.Join(ds[1].dir, "state", "incarnation.json")); err != nil {
		t.Fatalf("the standby kept no incarnation record: %v", err)
	}
	stepClock(t, -time.Hour)
	stepped -= time.Hour
	tl.mark("standby stopped, its incarnation record removed, clock stepped another hour back")
	ownerOff, standbyOff = ds[0].logSize(), ds[1].logSize()
	restarted = time.Now()
	ds[1].start()
	tl.mark("standby started")
	started, _ = lineTime(ds[1].waitLog(standbyOff, 30*time.Second, "cluster node started"))
	waitSeesLive(t, owner, standby.ID, 15*time.Second)
	waitSeesLive(t, standby, owner.ID, 5*time.Second)
	up, _ = lineTime(ds[0].waitLog(ownerOff, time.Second, "director up", "peer="+standby.ID))
	t.Logf("without its record: the owner saw the restarted standby live %v after its cluster node started", up.Sub(started).Round(time.Millisecond))
	if limit := 8 * cluster.DefaultFailureTimeout; up.Sub(started) > limit {
		t.Errorf("without its record: the owner saw the restarted standby live %v after its cluster node started, want within %v", up.Sub(started), limit)
	}
	if k := countLines(ds[0].logSince(ownerOff), "director restarted with an earlier incarnation; accepting it", "peer="+standby.ID); k != 1 {
		t.Errorf("the owner logged the restart with an earlier incarnation %d times, want once", k)
	}
	if got := settle(t, tp, vip, 2*time.Second, 20*time.Second); got != owner.ID {
		t.Errorf("after the restart without a record the VIP settled on %s, want %s", got, owner.ID)
	}
	if tl.everOn(vip, standby.ID, restarted, time.Now()) {
		t.Errorf("the standby restarted without a record held the VIP:\n%s", tl)
	}
	tl.close()
	t.Logf("VIP holders:\n%s", tl)
}

// stepClock steps the VM's clock (CLOCK_REALTIME, shared by every network
// namespace) by d.
func stepClock(t *testing.T, d time.Duration) {
	t.Helper()
	if d == 0 {
		return
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &now); err != nil {
		t.Fatalf("reading the clock: %v", err)
	}
	to := unix.NsecToTimespec(now.Nano() + d.Nanoseconds())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &to); err != nil {
		t.Fatalf("stepping the clock by %v: %v", d, err)
	}
	t.Logf("clock stepped by %v: now %v", d, time.Now().UTC().Format(time.RFC3339))
}

// seesLive checks that host's cluster view (`lvsd status --json`) counts
// the director peer live, or not.
func seesLive(t *testing.T, host *topo.Host, peer string, want bool) {
	t.Helper()
	v := statusPart[cluster.View](t, host, "cluster")
	live := slices.ContainsFunc(v.Members, func(m cluster.MemberView) bool { return m.Name == peer && m.Live })
	if live != want {
		t.Errorf("%s sees %s live: %v, want %v (members %+v)", host.ID, peer, live, want, v.Members)
	}
}

// waitSeesLive waits until host's cluster view counts peer live.
func waitSeesLive(t *testing.T, host *topo.Host, peer string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := statusPart[cluster.View](t, host, "cluster")
		if slices.ContainsFunc(v.Members, func(m cluster.MemberView) bool { return m.Name == peer && m.Live }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not see %s live after %v: members %+v, unused heartbeats %d", host.ID, peer, timeout,
				v.Members, v.UnusedHeartbeats)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
