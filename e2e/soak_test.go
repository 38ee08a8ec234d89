//go:build e2e && soak

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestSoak is a chaos soak: three directors (active-standby, connection
// sync on) with a DR and a FULLNAT service, long-lived connections through
// both VIPs and a stream of new ones, while a seeded random schedule
// injects faults one after the other — configuration edits (weights, a
// service added and removed, an invalid file), a backend's health flapping,
// kill -9 and restart of a director, a planned restart, an upgrade to
// the previous release and back, a link cut, a partition. After each fault the cluster must settle to what its
// configuration decides, and at the end the run is checked against the
// invariants in soakReport: no established connection lost (every fault
// here is one the docs promise to keep them through), new connections
// failing only inside a fault's window, at most one holder per VIP outside
// a fault's documented window, the same Maglev tables on every director,
// bounded memory, descriptors, goroutines and conntrack entries, and no
// ERROR line outside a fault's window.
//
// `make test` runs it for 90 s of faults on schedule 1 (the Makefile's
// SOAK_SHORT, SOAK_SEED); `make soak DURATION=2h` runs it for two hours; without
// LVSD_SOAK_DURATION it runs 3 minutes. LVSD_SOAK_SEED replays a schedule: a failed
// run prints its seed. The report goes to soak-report.txt in the output
// folder.
func TestSoak(t *testing.T) {
	needPrev(t) // the upgrade faults run the previous release
	fdLimit(t, 4096)
	duration := 3 * time.Minute
	if v := os.Getenv("LVSD_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			t.Fatalf("LVSD_SOAK_DURATION=%q: want a duration of at least 1m", v)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LVSD_SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LVSD_SOAK_SEED=%q: want an unsigned integer", v)
		}
		seed = s
	}
	schedule := soakSchedule(seed, duration)
	t.Logf("soak: seed %d, %v, %d faults scheduled (replay: LVSD_SOAK_SEED=%d LVSD_SOAK_DURATION=%v)",
		seed, duration, len(schedule), seed, duration)

	s := newSoak(t)
	rep := &soakReport{seed: seed, duration: duration, start: time.Now()}
	defer func() {
		text := rep.String()
		t.Logf("soak report:\n%s", text)
		if outDir != "" {
			_ = os.WriteFile(filepath.Join(outDir, "soak-report.txt"), []byte(text), 0o644)
		}
		if t.Failed() {
			t.Logf("replay with LVSD_SOAK_SEED=%d LVSD_SOAK_DURATION=%v", seed, duration)
		}
	}()
	s.run(schedule, duration, rep)
	rep.check(t)
}

// The soak's services: one DR and one FULLNAT VIP with the long-lived
// connections, and an extra service on the DR VIP that faults add and
// remove.
const (
	soakEcho   = 7001 // client speaks first
	soakTick   = 7002 // server speaks first
	soakExtra  = 7003 // the port of the service added and removed
	soakHealth = 7010 // the health checks' port: stopping it fails the checks, not the traffic
	// soakConns is the number of long-lived connections per VIP, half of
	// each kind.
	soakConns = 40
	// soakTimers are the cluster's: default heartbeats, a short address
	// lifetime so a killed owner's VIP goes soon (the window in which two
	// directors hold it).
	soakAddressLifetime = 4 * time.Second
	soakFailureTimeout  = 250 * time.Millisecond
)

var (
	soakVIPDR      = netip.MustParseAddr("10.0.0.50")
	soakVIPFullNAT = netip.MustParseAddr("10.0.0.52")
	soakSNAT       = []netip.Addr{netip.MustParseAddr("10.0.0.70"), netip.MustParseAddr("10.0.0.71")}
)

// soak is the running cluster under test.
type soak struct {
	t       *testing.T
	tp      *topo.Topology
	ds      []*lvsd
	echo    map[string]*echo.Server
	fleets  []*fleet
	probers map[netip.Addr]*prober
	tl      *timeline
	res     *soakResources
	// procs guards the directors' processes (lvsd.cmd, lvsd.exited),
	// which faults replace while the resource sampler reads them.
	procs   sync.Mutex
	weights [2][2]int // per service (DR, FULLNAT), per real server: the configured weight
	// diagnoses holds, for each lost connection, what the directors' IPVS
	// and conntrack tables said about it right after (watchLosses).
	diagnoses []string
	extra     bool // the extra service is configured
}

func newSoak(t *testing.T) *soak {
	tp := topo.New(t, topo.WithDirectors(3), topo.WithClientSources(4))
	s := &soak{t: t, tp: tp, probers: map[netip.Addr]*prober{}, weights: [2][2]int{{1, 1}, {1, 1}}}
	rss := tp.RealServers()
	s.echo = serveEcho(t, echo.Config{TCP: []uint16{soakEcho, soakExtra, soakHealth}}, rss...)
	for _, rs := range rss {
		ts, err := echo.ServeTicks(t.Context(), rs, rs.ID, soakTick, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ts.Close() })
	}
	holdVIPOnLoopback(t, soakVIPDR, rss...)

	key := clusterKey(t)
	for i, d := range tp.Directors() {
		extra := fmt.Sprintf("  priority: %d\n  address_lifetime: %v\n  conn_sync: {enabled: true}\n", 250-50*i, soakAddressLifetime)
		l := newClusterDirector(t, tp, d, key, extra)
		s.ds = append(s.ds, l)
		s.writeServices(l)
		l.start()
	}
	for _, l := range s.ds {
		l.waitServices(4, 2)
	}
	for _, v := range []netip.Addr{soakVIPDR, soakVIPFullNAT} {
		waitHolders(t, tp, v, 30*time.Second, onlyOn(tp.Director(1).ID))
	}
	settle(t, tp, soakVIPDR, 2*time.Second, 30*time.Second)

	s.tl = startTimeline(t, tp, append([]netip.Addr{soakVIPDR, soakVIPFullNAT}, soakSNAT...))
	s.res = startSoakResources(t, s.ds, &s.procs)
	src := tp.ClientSources(false)
	for i, v := range []netip.Addr{soakVIPDR, soakVIPFullNAT} {
		f := newFleet(t, tp.Client(), src[i], v, soakEcho, soakTick, 100*time.Millisecond)
		if err := f.open(soakConns, false); err != nil {
			t.Fatal(err)
		}
		if broken, waiting := f.waitExchanged(time.Now().Add(-time.Second), 20*time.Second); len(broken)+waiting > 0 {
			t.Fatalf("%s: %d connections broke, %d never exchanged before the soak began: %v", v, len(broken), waiting, broken)
		}
		s.fleets = append(s.fleets, f)
		s.probers[v] = startProber(t, tp.Client(), netip.AddrPortFrom(v, soakEcho), 200*time.Millisecond)
	}
	return s
}

// writeServices writes the soak's service files into l's folder, as they
// are configured now.
func (s *soak) writeServices(l *lvsd) {
	rs1, rs2 := s.tp.RS(1).V4, s.tp.RS(2).V4
	health := fmt.Sprintf("health: {interval: 300ms, timeout: 250ms, rise: 2, fall: 2, checks: [{type: tcp, port: %d}]}\n", soakHealth)
	backends := func(w [2]int) string {
		return fmt.Sprintf("backends:\n  - {address: %s, weight: %d}\n  - {address: %s, weight: %d}\n", rs1, w[0], rs2, w[1])
	}
	dir := filepath.Join(l.dir, "services.d")
	writeAtomic(s.t, filepath.Join(dir, "dr.yaml"), fmt.Sprintf("service: dr\nvip: %s\nports: [%d, %d]\nforwarding: dr\n%s%s",
		soakVIPDR, soakEcho, soakTick, health, backends(s.weights[0])))
	writeAtomic(s.t, filepath.Join(dir, "fullnat.yaml"), fmt.Sprintf(
		"service: fullnat\nvip: %s\nports: [%d, %d]\nforwarding: fullnat\nfullnat: {source_addresses: [%s, %s]}\n%s%s",
		soakVIPFullNAT, soakEcho, soakTick, soakSNAT[0], soakSNAT[1], health, backends(s.weights[1])))
	extra := filepath.Join(dir, "extra.yaml")
	if s.extra {
		writeAtomic(s.t, extra, fmt.Sprintf("service: extra\nvip: %s\nports: [%d]\nforwarding: dr\n%s", soakVIPDR, soakExtra,
			backends([2]int{1, 1})))
	} else if err := os.Remove(extra); err != nil && !os.IsNotExist(err) {
		s.t.Fatal(err)
	}
}

// ipvsServices is how many IPVS services each director should program.
func (s *soak) ipvsServices() int {
	n := 4 // two ports on each of two VIPs
	if s.extra {
		n++
	}
	return n
}

// run plays the schedule: each fault, then a settle and the checks of a
// settled cluster; the connections live through all of it.
// run injects the schedule's faults until duration has passed: the
// schedule's times are the earliest at which each fault starts, and settling
// after a fault pushes the rest later, so a run lasts duration (plus the
// last fault and its settling) and injects the schedule's first faults
// only — the same ones for the same seed.
func (s *soak) run(schedule []soakFault, duration time.Duration, rep *soakReport) {
	begin := time.Now()
	extend := time.NewTicker(20 * time.Second)
	defer extend.Stop()
	for _, f := range s.fleets {
		f.extend(time.Now().Add(2 * time.Minute))
	}
	stopWatch := s.watchLosses()
	defer stopWatch()
	for i := range schedule {
		f := &schedule[i]
		if time.Since(begin) >= duration {
			break
		}
		for wait := time.Until(begin.Add(f.at)); wait > 0; wait = time.Until(begin.Add(f.at)) {
			select {
			case <-extend.C:
				for _, fl := range s.fleets {
					fl.extend(time.Now().Add(2 * time.Minute))
				}
			case <-time.After(wait):
			}
		}
		for _, fl := range s.fleets {
			fl.extend(time.Now().Add(2 * time.Minute))
		}
		s.tl.mark(f.String())
		f.start = time.Now()
		s.inject(f)
		f.end = time.Now()
		f.settled = s.settle(f, rep)
		rep.faults = append(rep.faults, *f)
		// Progress as it happens: a run that stops early (killed, stuck)
		// still says how far it got.
		settled := "did not settle"
		if !f.settled.IsZero() {
			settled = fmt.Sprintf("settled after %v", f.settled.Sub(f.end).Round(100*time.Millisecond))
		}
		s.t.Logf("%v: %s, %s", f.start.Sub(begin).Round(time.Second), f, settled)
		if s.t.Failed() {
			break
		}
	}
	stopWatch()
	end := time.Now().Add(2 * time.Second)
	for _, fl := range s.fleets {
		fl.stop(s.t, end)
	}
	for _, p := range s.probers {
		p.close()
	}
	s.tl.close()
	s.res.close()
	rep.end = end
	rep.collect(s)
}

// extend moves every connection's deadline to until: the deadlines are the
// test's, so a connection stalled by a fault waits as long as the run goes on.
func (f *fleet) extend(until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.conn.SetDeadline(until)
	}
}

// watchLosses looks at the connections every 200 ms and, for each one that
// broke, records at once what every director's IPVS connection table and
// conntrack table hold for its client port: a loss found at the end of a
// long run would otherwise leave nothing to explain it. It returns a
// function that stops it (idempotent).
func (s *soak) watchLosses() func() {
	stop, done := make(chan struct{}), make(chan struct{})
	seen := map[*survConn]bool{}
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, fl := range s.fleets {
				fl.mu.Lock()
				var broken []*survConn
				for _, c := range fl.conns {
					if c.err != nil && !seen[c] {
						seen[c] = true
						broken = append(broken, c)
					}
				}
				fl.mu.Unlock()
				for _, c := range broken {
					s.diagnoses = append(s.diagnoses, s.diagnose(fl.vip, c))
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); <-done }) }
}

// diagnose lists what each director knows of c's connection.
func (s *soak) diagnose(vip netip.Addr, c *survConn) string {
	port := strconv.Itoa(int(c.local.Port()))
	var b strings.Builder
	fmt.Fprintf(&b, "connection %d to %s from %s (%s) broke at %s: %v\n", c.id, vip, c.local, c.kind,
		c.errAt.Format("15:04:05.000"), c.err)
	for _, d := range s.tp.Directors() {
		ipvsOut, _ := d.Run(context.Background(), "ipvsadm", "-Lnc")
		ctOut, _ := d.Run(context.Background(), "conntrack", "-L", "-p", "tcp", "--orig-port-src", port)
		for _, line := range strings.Split(ipvsOut, "\n") {
			if strings.Contains(line, ":"+port+" ") {
				fmt.Fprintf(&b, "  %s ipvs: %s\n", d.ID, strings.TrimSpace(line))
			}
		}
		for _, line := range strings.Split(ctOut, "\n") {
			if strings.Contains(line, "sport="+port+" ") {
				fmt.Fprintf(&b, "  %s conntrack: %s\n", d.ID, strings.TrimSpace(line))
			}
		}
	}
	return b.String()
}
