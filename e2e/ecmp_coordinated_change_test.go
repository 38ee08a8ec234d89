//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Constants of TestECMPCoordinatedChange: the load (200 long-lived
// connections, 20 new ones a second) and the rolling push (one director
// after another, 5 s apart, as a configuration management run does).
const (
	pushFleet   = 200
	pushProbe   = 50 * time.Millisecond
	pushGap     = 5 * time.Second
	pushDrainAt = 2500 * time.Millisecond // after the push began: between the first director's and the second's
)

// pushRun is what became of one rolling push.
type pushRun struct {
	coordinated bool
	told        [3]time.Time // when each director was told to reload the new file
	loaded      [3]time.Time // when each director logged it had reloaded it
	switched    [3]time.Time // when each put the new backend in its table
	row         survivalRow
	probes      int
	slowProbes  int
	failed      []string // new connections that failed
	timeline    string   // new connections slow/started per second from the push
}

func (r pushRun) window() time.Duration {
	return slices.MaxFunc(r.switched[:], time.Time.Compare).Sub(slices.MinFunc(r.switched[:], time.Time.Compare))
}

func (r pushRun) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coordinated %t: %d/%d connections survived, %d broken; directors switched %v apart (",
		r.coordinated, r.row.survived, r.row.total, r.row.total-r.row.survived, r.window().Round(time.Millisecond))
	for i := range r.switched {
		fmt.Fprintf(&b, " director%d loaded +%v switched +%v;", i+1, r.loaded[i].Sub(r.loaded[0]).Round(time.Millisecond),
			r.switched[i].Sub(r.loaded[0]).Round(time.Millisecond))
	}
	fmt.Fprintf(&b, " ); new connections: %d, %d failed or retransmitted, %d failed; slow/started per second: %s\n%s",
		r.probes, r.slowProbes, len(r.failed), r.timeline, strings.Join(slices.Concat(r.row.failures, r.failed[:min(len(r.failed), 5)]), "\n"))
	return b.String()
}

// TestECMPCoordinatedChange: three ECMP directors under 200 long-lived
// connections and 20 new ones a second get a third backend one after
// another, 5 s apart (a rolling push), and the router moves flows in the
// middle of the push: director3 is drained 2.5 s in, so its flows, and
// about half of the others' (hash-threshold), go to the other two. The
// lab runs without connection sync: a moved flow keeps its backend only if
// its new director's Maglev table is the one it was scheduled with.
//
// Without coordination (cluster.coordinated_changes.enabled: false) each
// director switches as it reloads, 10 s from first to last, and the flows
// moved onto the switched director meanwhile are scheduled through the
// new table: the test reports how many broke. With it (the default under
// ecmp) no director switches before the last one has loaded the file,
// they switch within a heartbeat or so of each other, the status names
// the directors a held change waits for, and no connection breaks.
func TestECMPCoordinatedChange(t *testing.T) {
	l := newECMPLab(t, ecmpOptions{})
	ids := []string{"director", "director2", "director3"}
	for _, id := range ids {
		coordinate(t, l.ds[id], false)
	}
	l.start(ids...)
	without := l.rollingPush(t, false)
	t.Logf("rolling push without coordination: %s", without)

	for _, id := range ids {
		l.ds[id].stop()
	}
	for _, id := range ids {
		coordinate(t, l.ds[id], true)
		l.writeBackends(l.ds[id], 2)
	}
	l.start(ids...)
	l.waitGone(t, 60*time.Second)
	with := l.rollingPush(t, true)
	t.Logf("rolling push with coordination: %s", with)

	if broken := with.row.total - with.row.survived; broken > 0 {
		t.Errorf("with coordination %d of %d connections broke: %s", broken, with.row.total, strings.Join(with.row.failures, "; "))
	}
	// The bound is when director3 was told to reload: it advertises the
	// change before it logs "configuration reloaded", so on a busy host a
	// peer may switch before that line and still be right.
	for i, at := range with.switched {
		if at.Before(with.told[2]) {
			t.Errorf("with coordination director%d switched %v before director3 was told to reload the change", i+1, with.told[2].Sub(at))
		}
	}
	if w := with.window(); w > 2*time.Second {
		t.Errorf("with coordination the directors switched %v apart, want within 2 s (heartbeats every 200 ms)", w)
	}
	if w := without.window(); w < 2*pushGap-time.Second {
		t.Errorf("without coordination the directors switched only %v apart, want about %v: the push did not roll", w, 2*pushGap)
	}
	t.Logf("broken connections: %d without coordination, %d with; switch window %v without, %v with",
		without.row.total-without.row.survived, with.row.total-with.row.survived,
		without.window().Round(time.Millisecond), with.window().Round(time.Millisecond))
}

// coordinate sets cluster.coordinated_changes.enabled in d's agent file
// (true: the key left out, the default under ecmp). It takes effect at
// d's next start.
func coordinate(t *testing.T, d *lvsd, on bool) {
	t.Helper()
	const key = "  coordinated_changes: {enabled: false}\n"
	b := strings.Replace(readFile(t, d.config()), key, "", 1)
	if !on {
		b = strings.Replace(b, "  mode: ecmp\n", "  mode: ecmp\n"+key, 1)
	}
	writeAtomic(t, d.config(), b)
}

// writeBackends writes d's service file with the first n real servers.
func (l *ecmpLab) writeBackends(d *lvsd, n int) {
	body := fmt.Sprintf("service: dr\nvip: %s\nports: [80, %d, %d]\nbackends:\n", ecmpVIP, survEcho, survTick)
	for i := 1; i <= n; i++ {
		body += fmt.Sprintf("  - {address: %s}\n", l.tp.RS(i).V4)
	}
	writeAtomic(l.t, filepath.Join(d.dir, "services.d", "dr.yaml"), body)
}

// waitGone waits until no director's IPVS table has rs3 (left from the
// run before, draining): every director starts the push from the same
// table.
func (l *ecmpLab) waitGone(t *testing.T, timeout time.Duration) {
	t.Helper()
	rs3 := l.tp.RS(3).V4.String() + ":"
	deadline := time.Now().Add(timeout)
	for _, d := range l.ds {
		for strings.Contains(kernelDestinations(t, d.host, netip.AddrPortFrom(ecmpVIP, survEcho)), rs3) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still has rs3 %v after the restart:\n%s", d.host.ID, timeout,
					kernelDestinations(t, d.host, netip.AddrPortFrom(ecmpVIP, survEcho)))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// rollingPush opens the fleet and the new-connection prober, adds rs3 on
// each director 5 s after the one before, drains director3 between the
// first and the second, and returns what became of the connections.
// director3 is undrained (and the fleet closed) before it returns.
func (l *ecmpLab) rollingPush(t *testing.T, coordinated bool) pushRun {
	t.Helper()
	ds := []*lvsd{l.ds["director"], l.ds["director2"], l.ds["director3"]}
	l.waitPaths(3, 30*time.Second)
	f := newFleet(t, l.tp.Client(), l.tp.Client().V4, ecmpVIP, survEcho, survTick, ecmpFleetInterval)
	start := time.Now()
	if err := f.open(pushFleet, false); err != nil {
		t.Fatal(err)
	}
	if broken, waiting := f.waitExchanged(start, 20*time.Second); len(broken) > 0 || waiting > 0 {
		t.Fatalf("before the push: %d broken, %d not exchanging:\n%s", len(broken), waiting, strings.Join(broken, "\n"))
	}
	p := startNewConnProber(t, l.tp.Client(), pushProbe)
	time.Sleep(time.Second)
	marks := make([]int, len(ds))
	for i, d := range ds {
		marks[i] = d.logSize()
	}
	r := pushRun{coordinated: coordinated}
	at := time.Now()
	for i, d := range ds {
		time.Sleep(time.Until(at.Add(time.Duration(i) * pushGap)))
		l.writeBackends(d, 3)
		r.told[i] = time.Now()
		if i == 0 && coordinated {
			checkReloadHeld(t, d)
		} else {
			d.hup()
		}
		r.loaded[i] = lineAt(t, d.waitLog(marks[i], 15*time.Second, "configuration reloaded", "changed=1"))
		if i != 0 {
			continue
		}
		if coordinated {
			l.checkHeld(t, ds[0], marks[0])
		}
		time.Sleep(time.Until(at.Add(pushDrainAt)))
		if out, code := runLVSD(t, ds[2].host, "drain", "--config", ds[2].config()); code != 0 {
			t.Fatalf("lvsd drain: exit %d: %s", code, out)
		}
		l.waitPaths(2, 5*time.Second)
	}
	rs3 := "-> " + l.tp.RS(3).V4.String() + ":" // as the applied op's object names the destination
	for i, d := range ds {
		line := d.waitLog(marks[i], 45*time.Second, "msg=applied", rs3, "weight 1")
		r.switched[i] = lineAt(t, line)
		if coordinated {
			d.waitLog(marks[i], 5*time.Second, "changed services put in force: every live director has them")
		}
	}
	if coordinated {
		// The first director held the change for the others: expected, so
		// its drift check never warned that flows were at risk.
		if logged := ds[0].logSince(marks[0]); strings.Contains(logged, "flows_at_risk=true") {
			t.Errorf("%s warned of flows at risk while it held the change:\n%s", ds[0].host.ID, logged)
		}
	}
	end := slices.MaxFunc(r.switched[:], time.Time.Compare).Add(ecmpSettle)
	time.Sleep(time.Until(end))
	f.stop(t, end.Add(ecmpGrace))
	p.close()
	r.row = f.analyse(at, end)
	r.probes, r.slowProbes, r.failed = p.count(at, end, at)
	r.timeline = p.timeline(at, end)
	l.srv.drop(t)
	if out, code := runLVSD(t, ds[2].host, "undrain", "--config", ds[2].config()); code != 0 {
		t.Fatalf("lvsd undrain: exit %d: %s", code, out)
	}
	l.waitPaths(3, 10*time.Second)
	return r
}

// checkReloadHeld reloads the first director of a coordinated push with
// lvsd reload: it exits 0 and says the change is held, until when, instead
// of reading as applied.
func checkReloadHeld(t *testing.T, d *lvsd) {
	t.Helper()
	out, code := runLVSD(t, d.host, "reload", "--config", d.config())
	t.Logf("lvsd reload on %s, the first director of the push: exit %d:\n%s", d.host.ID, code, strings.TrimSpace(out))
	for _, want := range []string{"HELD until every live director has loaded the change", "not in force yet: dr\n",
		"waiting for: ", "in force at the latest at "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("lvsd reload on %s: exit %d, %q; want 0 and %q", d.host.ID, code, out, want)
		}
	}
}

// checkHeld: right after the first director loaded the change, its status
// says the change waits for the other two, and that they differ from it
// only by that change, in text and JSON; its log says so too (logged after
// the mark), and its kernel does not have rs3.
func (l *ecmpLab) checkHeld(t *testing.T, d *lvsd, mark int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	wants := []string{"dr: new definition waits for director2, director3",
		"CONFIGURATION DIFFERS from director2 in 1 service: dr; only by the change HELD here",
		"CONFIGURATION DIFFERS from director3 in 1 service: dr; only by the change HELD here"}
	for {
		text := statusText(t, d.host)
		if containsAll(text, wants) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lvsd status on %s does not say %q:\n%s", d.host.ID, wants, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, peer := range []string{"director2", "director3"} {
		d.waitLog(mark, 3*time.Second, "only by the change held here", "peer="+peer, "held_until=")
	}
	held := statusPart[struct {
		Lagging map[string][]string `json:"lagging"`
	}](t, d.host, "held_change")
	if got := held.Lagging["dr"]; !slices.Equal(got, []string{"director2", "director3"}) {
		t.Errorf("lvsd status --json on %s: held_change lagging %v, want director2 and director3", d.host.ID, held.Lagging)
	}
	if dests := kernelDestinations(t, d.host, netip.AddrPortFrom(ecmpVIP, survEcho)); strings.Contains(dests, l.tp.RS(3).V4.String()+":") {
		t.Errorf("%s put the held change in its table:\n%s", d.host.ID, dests)
	}
}
