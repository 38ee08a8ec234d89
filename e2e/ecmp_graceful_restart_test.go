//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestECMPGracefulRestart: three ECMP directors with BGP graceful restart
// (bgp.graceful_restart) and an FRR router that helps, as it does by
// default. `lvsd restart-hold`, then a stop and start of director2's lvsd
// under a fleet of 200 long-lived connections: the router's kernel route
// keeps director2's next hop all along (sampled every 50 ms, and every
// change the kernel reports), FRR holds its path as stale meanwhile and
// fresh again after the restart, every connection goes on, and none is
// re-hashed: connection sync is off, so a flow the router moved would
// show up in another director's IPVS table. The controls: a plain stop
// still withdraws at once, and kill -9 (no hold) is what graceful restart
// makes of a crash.
func TestECMPGracefulRestart(t *testing.T) {
	// BFD 1 s × 5: the fleet and the router share the emulated cores, and a
	// director's BFD starved for 3 s takes its path away mid-restart, which
	// re-hashes flows for a reason this test is not about.
	l := newECMPLab(t, ecmpOptions{extraBGP: "  graceful_restart: {restart_time: 60s}\n", bfdMultiplier: 5})
	l.start("director", "director2", "director3")
	t.Run("PlannedRestart", func(t *testing.T) { l.gracefulRestart(t, false) })
	t.Run("PlainStop", l.gracefulPlainStop)
	t.Run("Kill", l.gracefulKill)
}

// TestECMPGracefulRestartFullNAT: the planned restart of
// TestECMPGracefulRestart with a FULLNAT service, each director sourcing
// its connections from its own address (fullnat.per_director), which the
// restart hold keeps on the restarting director. FULLNAT under ECMP needs
// connection sync, so every director has every flow's entry: the router's
// unchanged route is what shows that no flow was re-hashed.
func TestECMPGracefulRestartFullNAT(t *testing.T) {
	l := newECMPLab(t, ecmpOptions{extraBGP: "  graceful_restart: {restart_time: 60s}\n", bfdMultiplier: 5, fullnat: true, sync: true})
	l.start("director", "director2", "director3")
	t.Run("PlannedRestart", func(t *testing.T) { l.gracefulRestart(t, true) })
}

// grFleet is the number of long-lived connections through the router.
const grFleet = 200

// gracefulRestart is the planned restart; synced: connection sync is on,
// so the IPVS tables cannot tell a re-hashed flow.
func (l *ecmpLab) gracefulRestart(t *testing.T, synced bool) {
	d, host := l.ds["director2"], l.tp.Director(2)
	all := l.waitPaths(3, 30*time.Second)
	f := newFleet(t, l.tp.Client(), l.tp.Client().V4, ecmpVIP, survEcho, survTick, ecmpFleetInterval)
	start := time.Now()
	if err := f.open(grFleet, false); err != nil {
		t.Fatal(err)
	}
	if broken, waiting := f.waitExchanged(start, 20*time.Second); len(broken) > 0 || waiting > 0 {
		t.Fatalf("before the restart: %d broken, %d not exchanging:\n%s", len(broken), waiting, strings.Join(broken, "\n"))
	}
	before := l.flowsByDirector(t)
	w := watchPaths(t, l, host.V4)

	out, code := runLVSD(t, host, "restart-hold", "--config", filepath.Join(d.dir, "lvsd.yaml"), "--for", "30s")
	if code != 0 {
		t.Fatalf("lvsd restart-hold: exit %d\n%s", code, out)
	}
	off, routerOff := d.logSize(), len(l.frr.Log("bgpd"))
	at := time.Now()
	d.stop()
	stopped := time.Since(at)
	staleSeen := make(chan frrResult, 1) // asked while lvsd starts: a vtysh takes seconds here
	go func() {
		staleSeen <- pollFRR(l, host.V4, 30*time.Second, func(s frrSample) bool { return s.present && s.stale })
	}()
	d.start()
	d.waitLog(off, 60*time.Second, "bgp sessions opened as the restarting speaker")
	checkGracefulStatus(t, d)
	// The router's log is the proof of a graceful restart (below); a
	// vtysh may take longer than the whole restart on the loaded VM, so
	// the stale path it shows is a measure, when it comes in time.
	stale := <-staleSeen
	if stale.err != nil {
		t.Logf("no vtysh answer showed %s's path stale during the restart: %v", host.ID, stale.err)
	}
	fresh := pollFRR(l, host.V4, 60*time.Second, func(s frrSample) bool { return s.present && !s.stale })
	if fresh.err != nil {
		t.Fatal(fresh.err)
	}
	end := time.Now().Add(ecmpSettle)
	time.Sleep(time.Until(end))
	after := l.flowsByDirector(t) // before the fleet closes its connections
	f.stop(t, end.Add(ecmpGrace))
	l.srv.drop(t)
	w.close()
	row := f.analyse(at, end)

	samples, missing := w.kernelSamples(at, end)
	if samples == 0 {
		t.Fatal("no sample of the router's route during the restart")
	}
	if len(missing) > 0 {
		t.Errorf("the router's route lacked %s in %d of %d samples during the restart, first: %s", host.V4, len(missing), samples, missing[0])
	}
	if changes := w.changesWithout(at, end); len(changes) > 0 {
		t.Errorf("the router's kernel route changed during the restart: %s", strings.Join(changes, "; "))
	}
	if !strings.Contains(l.frr.Log("bgpd")[routerOff:], fmt.Sprintf("neighbor %s(", host.V4)) ||
		!strings.Contains(l.frr.Log("bgpd")[routerOff:], "Down NSF peer closed the session") {
		t.Errorf("the router's bgpd did not log %s's session closing for a graceful restart", host.V4)
	}
	if moved := movedFlows(before, after); len(moved) > 0 && !synced {
		t.Errorf("%d established connections were re-hashed to another director, e.g. %s", len(moved), moved[0])
	}
	if row.survived != row.total {
		t.Errorf("%d/%d connections survived the planned restart, want all: %s", row.survived, row.total, strings.Join(row.failures, "; "))
	}
	// The End-of-RIB must follow the routes: the sessions open once the
	// first pass (on the kernel state kept over the restart) announced.
	log := d.logSince(off)
	if i, j := strings.Index(log, "msg=\"bgp route announced\""), strings.Index(log, "bgp sessions opened as the restarting speaker"); i < 0 || j < i {
		t.Errorf("the restarted director opened its sessions before it announced its routes")
	}
	t.Logf("planned restart under graceful restart: router paths %v; lvsd stopped in %v; %s's path stale in FRR %v after the stop, fresh again after %v; "+
		"%d kernel route samples, %d without %s; route changes in the window: %s; %d/%d connections survived, longest stall %v; re-hashed flows: %s",
		all, stopped.Round(time.Millisecond), host.ID, (stale.at.Sub(at)).Round(time.Millisecond), fresh.at.Sub(at).Round(time.Millisecond),
		samples, len(missing), host.V4, w.changesIn(at, end), row.survived, row.total, row.longest.Round(time.Millisecond), rehashed(before, after, synced))
}

// gracefulPlainStop: without a restart hold a stop withdraws, as it does
// without graceful restart, and the start announces again.
func (l *ecmpLab) gracefulPlainStop(t *testing.T) {
	d := l.ds["director3"]
	l.waitPaths(3, 30*time.Second)
	at := time.Now()
	d.stop()
	l.waitPaths(2, 10*time.Second)
	gone := time.Since(at)
	d.start()
	l.waitPaths(3, 60*time.Second)
	t.Logf("plain stop with graceful restart on: path gone %v after the stop (withdrawn first, stop_grace 1s)", gone.Round(time.Millisecond))
	if gone > 5*time.Second {
		t.Errorf("the path outlived a plain stop by %v", gone)
	}
}

// gracefulKill: kill -9 of lvsd, no hold. The kernel closes the BGP
// session without a NOTIFICATION, which a router that helps takes for a
// restart: it keeps the path as stale (the director's kernel still
// forwards) while BFD goes down too, until lvsd comes back. The new
// process opens its session at once, without the Forwarding State bit (no
// hold was recorded): the router drops the stale path as the session comes
// up and takes the announced one, if the first pass announced by then.
func (l *ecmpLab) gracefulKill(t *testing.T) {
	d, host := l.ds["director3"], l.tp.Director(3)
	l.waitPaths(3, 30*time.Second)
	w := watchPaths(t, l, host.V4)
	defer w.close()
	routerOff := len(l.frr.Log("bgpd"))
	killed := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	// Past BFD's detection time (3 s in this lab) and then some.
	time.Sleep(labBFDDetection + 3*time.Second)
	kept := w.kernelHas(time.Now())
	s, err := frrPath(l.frr, host.V4)
	if err != nil {
		t.Fatal(err)
	}
	nsf := strings.Contains(l.frr.Log("bgpd")[routerOff:], "Down NSF peer closed the session")
	off := d.logSize()
	restarted := time.Now()
	d.start()
	l.waitPaths(3, 60*time.Second)
	back := time.Since(restarted)
	log := d.logSince(off)
	if strings.Contains(log, "bgp sessions opened as the restarting speaker") {
		t.Error("lvsd restarted after kill -9 opened its sessions as a restarting speaker without a hold")
	}
	gone := w.firstWithout(restarted)
	t.Logf("kill -9 with graceful restart: path in the router's kernel %t %v after the kill (FRR: present %t, stale %t, NSF close logged %t); "+
		"lvsd restarted: path removed %v after the start, 3 paths %v after it; route changes: %s",
		kept, restarted.Sub(killed).Round(time.Millisecond), s.present, s.stale, nsf, gone, back.Round(time.Millisecond), w.changesIn(killed, time.Now()))
	if !kept || !s.stale || !nsf {
		t.Errorf("after kill -9 the router did not keep the path as stale (kernel %t, FRR stale %t, NSF close logged %t): graceful restart keeps it while the kernel forwards",
			kept, s.stale, nsf)
	}
}

// pathWatch samples the router's kernel route to the VIP every 50 ms,
// records every change the kernel reports, and polls FRR for whether the
// watched director's path is there and stale.
type pathWatch struct {
	probeLoop
	want   netip.Addr
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	samples []pathSample
	changes []topo.RouteEvent
	errs    []error
}

type pathSample struct {
	at       time.Time
	nexthops []netip.Addr
}

type frrSample struct {
	at            time.Time
	present       bool
	stale         bool
	paths, stales int
}

func watchPaths(t *testing.T, l *ecmpLab, want netip.Addr) *pathWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	events, err := l.tp.Router().WatchRoute(ctx, netip.PrefixFrom(ecmpVIP, 32))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &pathWatch{probeLoop: newProbeLoop(), want: want, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range events {
			w.mu.Lock()
			w.changes = append(w.changes, ev)
			w.mu.Unlock()
		}
	}()
	w.every(50*time.Millisecond, func() {
		nh, err := l.tp.Router().Nexthops(netip.PrefixFrom(ecmpVIP, 32))
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.errs = append(w.errs, err)
			return
		}
		w.samples = append(w.samples, pathSample{time.Now(), nh})
	})
	t.Cleanup(w.close)
	return w
}

func (w *pathWatch) close() {
	w.probeLoop.close()
	w.cancel()
	<-w.done
}

type frrResult struct {
	frrSample
	err error
}

// pollFRR asks FRR for the VIP's path through want every second until
// cond holds (each vtysh costs the emulated machine a lot: no faster).
func pollFRR(l *ecmpLab, want netip.Addr, timeout time.Duration, cond func(frrSample) bool) frrResult {
	deadline := time.Now().Add(timeout)
	var last frrSample
	var err error
	for time.Now().Before(deadline) {
		if last, err = frrPath(l.frr, want); err == nil && cond(last) {
			return frrResult{frrSample: last}
		}
		time.Sleep(time.Second)
	}
	return frrResult{last, fmt.Errorf("FRR's path to %s through %s: last %+v, %v", ecmpVIP, want, last, err)}
}

// frrPath is FRR's view of the VIP's paths: whether one from next hop
// want is there, and stale.
func frrPath(f *topo.FRR, want netip.Addr) (frrSample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := frrSample{at: time.Now()}
	out, err := f.Vtysh(ctx, fmt.Sprintf("show bgp ipv4 unicast %s/32 json", ecmpVIP))
	if err != nil {
		return s, err
	}
	var route struct {
		Paths []struct {
			Stale    bool `json:"stale"`
			Nexthops []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
		} `json:"paths"`
	}
	if strings.TrimSpace(out) == "{}" || strings.TrimSpace(out) == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(out), &route); err != nil {
		return s, fmt.Errorf("FRR's route %s: %w: %.300s", ecmpVIP, err, out)
	}
	for _, p := range route.Paths {
		s.paths++
		if p.Stale {
			s.stales++
		}
		for _, nh := range p.Nexthops {
			if nh.IP == want.String() {
				s.present, s.stale = true, s.stale || p.Stale
			}
		}
	}
	return s, nil
}

// kernelSamples counts the samples in [from, to] and lists those without
// the watched next hop.
func (w *pathWatch) kernelSamples(from, to time.Time) (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	var missing []string
	for _, s := range w.samples {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		n++
		if !slices.Contains(s.nexthops, w.want) {
			missing = append(missing, fmt.Sprintf("+%v %v", s.at.Sub(from).Round(time.Millisecond), s.nexthops))
		}
	}
	return n, missing
}

// changesWithout lists the kernel's route changes in [from, to] that
// lacked the watched next hop.
func (w *pathWatch) changesWithout(from, to time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, ev := range w.changes {
		if !ev.At.Before(from) && !ev.At.After(to) && !slices.Contains(ev.Nexthops, w.want) {
			out = append(out, fmt.Sprintf("+%v %v", ev.At.Sub(from).Round(time.Millisecond), ev.Nexthops))
		}
	}
	return out
}

// kernelHas reports whether the last sample before at had the next hop.
func (w *pathWatch) kernelHas(at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	has := false
	for _, s := range w.samples {
		if s.at.After(at) {
			break
		}
		has = slices.Contains(s.nexthops, w.want)
	}
	return has
}

// firstWithout is how long after from the kernel route first lacked the
// next hop ("never" if it did not).
func (w *pathWatch) firstWithout(from time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if !s.at.Before(from) && !slices.Contains(s.nexthops, w.want) {
			return s.at.Sub(from).Round(time.Millisecond).String()
		}
	}
	return "never"
}

// changesIn lists the kernel's route changes in [from, to].
func (w *pathWatch) changesIn(from, to time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, ev := range w.changes {
		if !ev.At.Before(from) && !ev.At.After(to) {
			out = append(out, fmt.Sprintf("+%v %v", ev.At.Sub(from).Round(time.Millisecond), ev.Nexthops))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// flowsByDirector lists, per director, the client ends of the fleet's
// connections in its IPVS table (connection sync is off: only its own).
func (l *ecmpLab) flowsByDirector(t *testing.T) map[string]map[netip.AddrPort]bool {
	t.Helper()
	out := map[string]map[netip.AddrPort]bool{}
	for id, d := range l.ds {
		k := openIPVS(t, d.host)
		conns, err := k.Connections(t.Context())
		k.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[id] = map[netip.AddrPort]bool{}
		for _, c := range conns {
			if c.Virtual.Addr() == ecmpVIP && (c.Virtual.Port() == survEcho || c.Virtual.Port() == survTick) && c.State == "ESTABLISHED" {
				out[id][c.Client] = true
			}
		}
	}
	return out
}

// rehashed says how many flows moved, when the tables can tell.
func rehashed(before, after map[string]map[netip.AddrPort]bool, synced bool) string {
	if synced {
		return "(connection sync: not told by the IPVS tables)"
	}
	return fmt.Sprint(len(movedFlows(before, after)))
}

// movedFlows lists the connections that were on one director before and
// are on another after: the router re-hashed them.
func movedFlows(before, after map[string]map[netip.AddrPort]bool) []string {
	var moved []string
	for id, flows := range after {
		for c := range flows {
			for other, was := range before {
				if other != id && was[c] && !before[id][c] {
					moved = append(moved, fmt.Sprintf("%s from %s to %s", c, other, id))
				}
			}
		}
	}
	slices.Sort(moved)
	return moved
}

// checkGracefulStatus: once a director that restarted gracefully has opened
// its sessions, lvsd status says graceful restart is on with its restart
// time, and --json that this process restarted and when it opened them.
func checkGracefulStatus(t *testing.T, d *lvsd) {
	t.Helper()
	if text, want := statusText(t, d.host), "graceful restart on (restart time 60s)"; !strings.Contains(text, want) {
		t.Errorf("lvsd status on %s does not say %q:\n%s", d.host.ID, want, text)
	}
	bgp := statusPart[struct {
		GracefulRestart *struct {
			RestartTime time.Duration
			Restarted   bool
			OpenedAt    time.Time
		}
	}](t, d.host, "bgp")
	if g := bgp.GracefulRestart; g == nil || g.RestartTime != time.Minute || !g.Restarted || g.OpenedAt.IsZero() {
		t.Errorf("lvsd status --json on %s: bgp.GracefulRestart %+v, want restarted with 60s and the sessions' opening", d.host.ID, g)
	}
}
