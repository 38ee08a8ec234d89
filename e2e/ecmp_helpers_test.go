//go:build e2e

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
	"github.com/lvsd/lvsd/e2e/ecmplab"
	"github.com/lvsd/lvsd/e2e/topo"
)

// Helpers of the ECMP tests: a router running FRR (BGP, BFD, ECMP with an
// L4 hash) between the client and the directors, every director running
// lvsd in cluster mode ecmp with a bgp block, DR services on a VIP the
// real servers hold on lo.

// ecmpVIP is in the lab's VIP range (ecmplab.VIPRanges), which the router
// accepts host routes from.
var ecmpVIP = netip.MustParseAddr("192.0.2.10")

// The lab's BFD timers, on both sides: 3 s to detect a failure. The
// default 100 ms × 3 (docs/ecmp.md) flaps here: the VM shares 2 emulated
// cores with a router, four directors, real servers and a client, and its
// processes go unscheduled for up to 0.8 s when the host is busy. These
// tests prove what lvsd does with BFD's verdicts; e2e/ecmplab measures how
// fast the fast profile detects.
const (
	labBFDInterval   = time.Second
	labBFDMultiplier = 3
	labBFDDetection  = labBFDInterval * labBFDMultiplier
	// BFD detects failures; the BGP hold time only backs it up (3 s
	// expired under the same stalls), and is long enough that a path
	// taken away within 6 s of a cut was taken by BFD: the hold timer
	// fires 10-15 s after it.
	labHoldTime = 15 * time.Second
)

// ecmpLab is one ECMP topology with its router.
type ecmpLab struct {
	t   *testing.T
	tp  *topo.Topology
	frr *topo.FRR
	srv survServers
	key string
	ds  map[string]*lvsd // by director ID, the ones started
	// mode is the services' forwarding: "DR", or "FULLNAT" with a source
	// address per director (snatOf).
	mode string
}

// ecmpOptions shape a lab.
type ecmpOptions struct {
	directors int    // in the topology (default 3)
	sources   int    // extra client addresses
	sync      bool   // cluster.conn_sync
	password  string // TCP-MD5 on the router's side for every director
	// bgpPassword is the password the directors use ("" none).
	bgpPassword string
	extraBGP    string // more lines of the bgp block (two-space indent)
	fullnat     bool   // FULLNAT services instead of DR
	// bfdMultiplier replaces labBFDMultiplier on both sides: a test whose
	// load stalls the whole VM for seconds, and that is not about
	// detecting failures, sets it higher.
	bfdMultiplier int
	bfdInterval   time.Duration // replaces labBFDInterval on both sides
	holdTime      time.Duration // replaces labHoldTime on both sides, likewise
	peerShare     int           // cluster.conn_sync.peer_conntrack_share, when not 0
	toa           bool          // FULLNAT with client_address: toa, the real servers' programs on
}

// snatOf is director i's (from 1) FULLNAT source address in a FULLNAT
// lab: 10.0.0.71 for "director", 10.0.0.72 for "director2"…
func snatOf(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(70 + i)}) }

// newECMPLab builds the topology, starts the router and the real servers.
// Directors start with startDirector.
func newECMPLab(t *testing.T, o ecmpOptions) *ecmpLab {
	t.Helper()
	if o.directors == 0 {
		o.directors = 3
	}
	if o.bfdMultiplier == 0 {
		o.bfdMultiplier = labBFDMultiplier
	}
	if o.holdTime == 0 {
		o.holdTime = labHoldTime
	}
	if o.bfdInterval == 0 {
		o.bfdInterval = labBFDInterval
	}
	// rs3 is a backend only in TestECMP/HealthDisagreement.
	tp := topo.New(t, topo.WithRouter(), topo.WithDirectors(o.directors), topo.WithClientSources(o.sources), topo.WithRealServers(3))
	l := &ecmpLab{t: t, tp: tp, key: clusterKey(t), ds: map[string]*lvsd{}, mode: "DR"}
	if o.fullnat {
		l.mode = "FULLNAT"
	}
	l.srv = setupSurvivalServers(t, tp, []survMode{{name: l.mode, vip: ecmpVIP}}, ecmpFleetInterval)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RealServers()...)
	if o.toa {
		l.restoreClientAddresses(o.directors)
	}
	var ns []ecmplab.Neighbor
	for _, d := range tp.Directors() {
		ns = append(ns, ecmplab.Neighbor{Address: d.V4, BFD: true, Password: o.password,
			BFDInterval: o.bfdInterval, BFDMultiplier: o.bfdMultiplier, HoldTime: o.holdTime})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	f, err := tp.Router().StartFRR(ctx, ecmplab.RouterConfig(tp.Router().V4, ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("router bgpd log:\n%s\nbfdd log:\n%s", f.Log("bgpd"), f.Log("bfdd"))
		}
		if keep := keepDir(t); keep != "" { // next to the directors' logs, to line them up
			for _, name := range []string{"bgpd", "bfdd", "zebra"} {
				_ = os.WriteFile(filepath.Join(keep, "router-"+name+".log"), []byte(f.Log(name)), 0o644)
			}
		}
		_ = f.Stop()
	})
	l.frr = f
	if err := tp.RouteViaRouter(netip.PrefixFrom(ecmpVIP, 32)); err != nil {
		t.Fatal(err)
	}
	for _, d := range tp.Directors() {
		l.ds[d.ID] = l.newDirector(d, o)
	}
	return l
}

// restoreClientAddresses runs lvsd's real-server role with client_address
// toa for the fleet's echo port on the real servers (one agent serves both:
// their namespaces share the test's cgroup), accepting the options of every
// director's source address, and reopens the echo listeners after its
// programs.
func (l *ecmpLab) restoreClientAddresses(directors int) {
	t := l.t
	systemBPFFS(t)
	var from, backends []string
	for i := 1; i <= directors; i++ {
		from = append(from, strconv.Quote(snatOf(i).String()))
	}
	for _, rs := range l.tp.RealServers() {
		backends = append(backends, strconv.Quote(netip.AddrPortFrom(rs.V4, survEcho).String()))
	}
	rs := newRealServer(t, l.tp.RS(1), fmt.Sprintf("  client_address:\n    mode: toa\n    directors: [%s]\n    backends: [%s]\n    cgroup: %s\n",
		strings.Join(from, ", "), strings.Join(backends, ", "), ownCgroup(t)))
	rs.start()
	rs.waitReady(0)
	rs.waitLog(0, 15*time.Second, "op=toa-attach")
	for _, e := range l.srv.echo {
		if err := e.Stop(echo.TCP, survEcho); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(echo.TCP, survEcho); err != nil {
			t.Fatal(err)
		}
	}
}

// newDirector writes d's configuration (not started).
func (l *ecmpLab) newDirector(d *topo.Host, o ecmpOptions) *lvsd {
	t := l.t
	// Under ECMP the routers' BFD moves the traffic; the cluster's failure
	// detection only decides whom the relay sends to, and a false failure
	// costs a full replay to the member when it is heard again. Four
	// directors and a router in one emulated VM stall each other past the
	// default 250 ms when one starts (seen: a burst of false failures at
	// every join), so the lab runs with 1 s, as docs/ecmp.md advises, and
	// heartbeats every 200 ms: at 50 ms the three directors' heartbeats
	// alone took a fifth of their CPU in a profile of this lab (a 64 KB
	// buffer per packet received in memberlist's transport, and the sends),
	// and the VM was 99 % busy with the fleet.
	share := ""
	if o.peerShare != 0 {
		share = fmt.Sprintf(", peer_conntrack_share: %d", o.peerShare)
	}
	clusterExtra := fmt.Sprintf("  mode: ecmp\n  failure_timeout: 1s\n  heartbeat_interval: 200ms\n  conn_sync: {enabled: %t%s}\n", o.sync, share)
	if o.fullnat {
		// A lost director's source addresses go to a survivor only where a
		// quorum of the configured directors is live: a majority by
		// default, and the lab starts its last directors only to join.
		clusterExtra += "  quorum: 2\n"
	}
	ld := newClusterDirector(t, l.tp, d, l.key, clusterExtra)
	if keep := keepDir(t); keep != "" && os.Getenv("E2E_CPU_PROFILE") != "" {
		ld.profile = filepath.Join(keep, d.ID+".pprof")
	}
	password := ""
	if o.bgpPassword != "" {
		pf := filepath.Join(ld.dir, "bgp.password")
		if err := os.WriteFile(pf, []byte(o.bgpPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		password = ", password_file: " + pf
	}
	router := l.tp.Router()
	agentFile := filepath.Join(ld.dir, "lvsd.yaml")
	b, err := os.ReadFile(agentFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, agentFile, string(b)+fmt.Sprintf("bgp:\n  asn: %d\n  peers:\n"+
		"    - {address: %s, asn: %d, hold_time: %v, connect_retry: 1s, bfd: {enabled: true, interval: %v, multiplier: %d}%s}\n"+
		"  stop_grace: 1s\n%s", ecmplab.DirectorASN, router.V4, ecmplab.RouterASN, o.holdTime, o.bfdInterval, o.bfdMultiplier, password, o.extraBGP))
	service := "service: dr\n"
	if o.fullnat {
		service = "service: fullnat\nforwarding: fullnat\nfullnat:\n  per_director:\n"
		for i, d := range l.tp.Directors() {
			service += fmt.Sprintf("    %s: [%s]\n", d.ID, snatOf(i+1))
		}
		if o.toa {
			service += "client_address: toa\n"
		}
	}
	writeFile(t, filepath.Join(ld.dir, "services.d", "dr.yaml"), fmt.Sprintf(
		"%svip: %s\nports: [80, %d, %d]\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
		service, ecmpVIP, survEcho, survTick, l.tp.RS(1).V4, l.tp.RS(2).V4))
	return ld
}

// start starts lvsd on the directors ids and waits until the router has a
// path to the VIP through every director started so far.
func (l *ecmpLab) start(ids ...string) {
	l.t.Helper()
	for _, id := range ids {
		l.ds[id].start()
	}
	l.waitPaths(l.running(), 60*time.Second)
}

// running counts the directors whose lvsd runs.
func (l *ecmpLab) running() int {
	n := 0
	for _, d := range l.ds {
		if d.cmd != nil {
			select {
			case <-d.exited:
			default:
				n++
			}
		}
	}
	return n
}

// waitPaths waits until the router's route to the VIP has n next hops.
func (l *ecmpLab) waitPaths(n int, timeout time.Duration) []netip.Addr {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got, err := l.tp.Router().WaitNexthops(ctx, netip.PrefixFrom(ecmpVIP, 32), n)
	if err != nil {
		l.t.Fatal(err)
	}
	return got
}

// scheduled is how many connections director d scheduled to the VIP's
// destinations so far (the kernel's per-destination counters: synced
// connections are not counted).
func scheduled(t *testing.T, d *lvsd) uint64 {
	t.Helper()
	k := d.ipvs()
	svcs, err := k.Services(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, s := range svcs {
		if s.Addr != ecmpVIP {
			continue
		}
		dsts, err := k.Destinations(t.Context(), s.ServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		for _, dst := range dsts {
			n += dst.Traffic().Connections
		}
	}
	return n
}

// settledScheduled is scheduled once the kernel's counters have caught up:
// it adds its per-CPU IPVS counters up every 2 s (the estimator), so a
// read just after connections were scheduled may not count them yet. It
// reads until two reads 2.5 s apart agree (at most 10 s).
func settledScheduled(t *testing.T, d *lvsd) uint64 {
	t.Helper()
	n := scheduled(t, d)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(2500 * time.Millisecond)
		m := scheduled(t, d)
		if m == n {
			break
		}
		n = m
	}
	return n
}

// newConnProber opens a connection to the VIP every period from a new
// source port, and records when each started and how long its handshake
// took: one whose first SYN went to a dead director needs a retransmit.
type newConnProber struct {
	probeLoop
	mu   sync.Mutex
	runs []probeRun
}

type probeRun struct {
	start, done time.Time
	err         error
}

// slow: the probe failed or needed a retransmit (longer than 900 ms: its
// first SYN was lost).
func (r probeRun) slow() bool { return r.err != nil || r.done.Sub(r.start) > 900*time.Millisecond }

func startNewConnProber(t *testing.T, client *topo.Host, period time.Duration) *newConnProber {
	p := &newConnProber{probeLoop: newProbeLoop()}
	dst := netip.AddrPortFrom(ecmpVIP, 80)
	p.every(period, func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := echo.Ask(ctx, client, netip.Addr{}, dst, echo.TCP)
		p.mu.Lock()
		p.runs = append(p.runs, probeRun{start, time.Now(), err})
		p.mu.Unlock()
	})
	t.Cleanup(p.close)
	return p
}

// count returns, of the probes started in [from, to], how many there
// were, how many failed or needed a retransmit (longer than 900 ms: the
// first SYN was lost), and how many failed that started after settled.
func (p *newConnProber) count(from, to, settled time.Time) (n, slow int, failedAfter []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.runs {
		if r.start.Before(from) || r.start.After(to) {
			continue
		}
		n++
		if r.slow() {
			slow++
		}
		if r.err != nil && r.start.After(settled) {
			failedAfter = append(failedAfter, fmt.Sprintf("+%v: %v", r.start.Sub(from).Round(time.Millisecond), r.err))
		}
	}
	return n, slow, failedAfter
}

// timeline says, per second from from to to, how many probes started and
// how many of those were slow ("3/10 1/10 …"): whether new connections
// suffered before the router's change (the machines were busy) or after it.
func (p *newConnProber) timeline(from, to time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	secs := int(to.Sub(from)/time.Second) + 1
	started, slow := make([]int, secs), make([]int, secs)
	for _, r := range p.runs {
		if r.start.Before(from) || r.start.After(to) {
			continue
		}
		i := int(r.start.Sub(from) / time.Second)
		started[i]++
		if r.slow() {
			slow[i]++
		}
	}
	var b strings.Builder
	for i := range secs {
		fmt.Fprintf(&b, "%d/%d ", slow[i], started[i])
	}
	return strings.TrimSpace(b.String())
}

// waitSynced waits until every running director's IPVS table has at least
// n established connections to the VIP's fleet ports: its own and the
// others' through connection sync. A drain or a re-hash moves flows, and
// a flow that moves before its entry arrived is a sync-latency miss, not
// what the subtest is about (measured apart in DirectorLoss and Join).
func (l *ecmpLab) waitSynced(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, d := range l.ds {
		k := d.ipvs() // one netlink handle per director, not one per poll
		for {
			conns, err := k.Connections(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			established := 0
			for _, c := range conns {
				if c.Virtual.Addr() == ecmpVIP && (c.Virtual.Port() == survEcho || c.Virtual.Port() == survTick) && c.State == "ESTABLISHED" {
					established++
				}
			}
			if established >= n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s has %d established connections to %s, want %d: connection sync is behind", d.host.ID, established, ecmpVIP, n)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
