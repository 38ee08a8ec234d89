//go:build e2e && dpbench

package e2e

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// The data-plane benchmark (`make dpbench`): what each forwarding setup
// costs, as ratios against plain ipvsadm-programmed DR measured in the
// same run. It asserts only that the traffic flows; the figures are for
// docs/performance.md.
const (
	dpEcho    = 7001 // greeting server: one line per connection
	dpBulk    = 5001 // bulk streams
	dpWorkers = 8
	dpQuiet   = 2 * time.Second // lvsd's own CPU is measured this long before the load
)

var (
	dpGateway = netip.MustParseAddr("10.0.0.60")
	dpSNAT    = "fullnat: {source_addresses: [10.0.0.70, 10.0.0.71]}\n"
	dpExtraIP = netip.MustParseAddr("10.0.0.45") // sorts before every measured VIP: its rules come first
	dpVIPs    = map[string]netip.Addr{
		"ipvsadm": netip.MustParseAddr("10.0.0.50"), "DR": netip.MustParseAddr("10.0.0.50"),
		"NAT": netip.MustParseAddr("10.0.0.51"), "FULLNAT": netip.MustParseAddr("10.0.0.52"), "TUNNEL": netip.MustParseAddr("10.0.0.53"),
	}
)

// dpSetup is one forwarding setup: a fresh topology of two directors in a
// cluster (or one programmed by ipvsadm), two real servers and a client.
type dpSetup struct {
	name      string
	mode      string // ipvsadm, DR, NAT, FULLNAT, TUNNEL
	sync      bool   // two directors in a cluster with connection sync; else one director alone
	conntrack bool   // ipvsadm: net.ipv4.vs.conntrack=1 with conntrack running
	toa       bool   // client_address: toa on the director
	toaRS     bool   // and the real servers' programs
	extra     int    // FULLNAT services besides the measured one
}

// dpFigures is one measurement of a setup.
type dpFigures struct {
	conns      connRate
	agents     time.Duration     // CPU time of every lvsd process while the connections were opened
	agentsIdle float64           // their share of a core in the quiet window before
	up, down   float64           // bytes per second
	programs   map[string]bpfRun // the TOA programs' runs while the connections were opened
}

// dataPathPerConn is the VM's busy CPU time per connection without the
// lvsd processes' (kernel, client and servers), in microseconds.
func (f dpFigures) dataPathPerConn() float64 {
	if f.conns.conns == 0 {
		return 0
	}
	return (float64(f.conns.busy)*1e6/userHZ - float64(f.agents.Microseconds())) / float64(f.conns.conns)
}

// agentsLoad is the lvsd processes' share of a core while the connections
// were opened.
func (f dpFigures) agentsLoad() float64 { return f.agents.Seconds() / f.conns.elapsed.Seconds() }

func dpSetups() []dpSetup {
	out := []dpSetup{
		{name: "ipvsadm DR (reference)", mode: "ipvsadm"},
		{name: "ipvsadm DR, conntrack=1", mode: "ipvsadm", conntrack: true},
	}
	for _, mode := range []string{"DR", "NAT", "FULLNAT", "TUNNEL"} {
		out = append(out, dpSetup{name: "lvsd " + mode, mode: mode}, dpSetup{name: "lvsd " + mode + ", sync", mode: mode, sync: true})
	}
	out = append(out,
		dpSetup{name: "lvsd FULLNAT, toa director", mode: "FULLNAT", toa: true},
		dpSetup{name: "lvsd FULLNAT, toa director + real servers", mode: "FULLNAT", toa: true, toaRS: true})
	if n := envInt("LVSD_DPBENCH_SERVICES", 10000); n > 1 {
		out = append(out, dpSetup{name: fmt.Sprintf("lvsd FULLNAT, %d services", n), mode: "FULLNAT", extra: n - 1})
	}
	return out
}

// TestDataPlaneCost: for each setup, new connections per second (8
// workers: connect, read a line, close) and bulk bytes per second (two
// streams, client to server and server to client), in rounds so that the
// setups interleave; then the table of medians with ratios to the
// reference. LVSD_DPBENCH_ROUNDS (2), LVSD_DPBENCH_WINDOW_MS (4000) and
// LVSD_DPBENCH_SERVICES (10000; 1 leaves that row out) tune it;
// LVSD_DPBENCH_PROFILE, a directory, gets a CPU profile of each lvsd of
// the sync rows (the relay's cost);
// LVSD_DPBENCH_ONLY, a regular expression, picks the setups whose whole name
// it matches.
func TestDataPlaneCost(t *testing.T) {
	rounds := envInt("LVSD_DPBENCH_ROUNDS", 2)
	window := time.Duration(envInt("LVSD_DPBENCH_WINDOW_MS", 4000)) * time.Millisecond
	setups := dpSetups()
	if only := os.Getenv("LVSD_DPBENCH_ONLY"); only != "" {
		re := regexp.MustCompile("^(?:" + only + ")$")
		setups = slices.DeleteFunc(setups, func(s dpSetup) bool { return !re.MatchString(s.name) })
	}
	got := map[string][]dpFigures{}
	for r := range rounds {
		for _, s := range setups {
			t.Run(fmt.Sprintf("%s/round%d", strings.ReplaceAll(s.name, " ", "_"), r+1), func(t *testing.T) {
				f := runDataPlane(t, s, window)
				t.Logf("%s: %.0f conn/s (%d, %d failed; the VM's CPU %.0f µs each, %.0f µs without lvsd's), lvsd %.1f%% → %.1f%% of a core, up %.1f MB/s, down %.1f MB/s",
					s.name, f.conns.perSecond(), f.conns.conns, f.conns.failed, f.conns.cpuPerConn(), f.dataPathPerConn(),
					100*f.agentsIdle, 100*f.agentsLoad(), f.up/1e6, f.down/1e6)
				got[s.name] = append(got[s.name], f)
			})
		}
	}
	table := dpTable(setups, got) + dpPrograms(setups, got)
	t.Logf("data-plane cost (%d rounds of %v windows, kernel %s):\n%s", rounds, window, kernelRelease(), table)
	if outDir != "" {
		os.WriteFile(filepath.Join(outDir, "dataplane.txt"), []byte(table), 0o644)
	}
}

func runDataPlane(t *testing.T, s dpSetup, window time.Duration) dpFigures {
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(16))
	rss := tp.RealServers()
	srcs := tp.ClientSources(false)
	echoes := serveEcho(t, echo.Config{TCP: []uint16{dpEcho}}, rss...)
	bulk := serveBulk(t, dpBulk, rss...)
	vip := dpVIPs[s.mode]
	if s.toa {
		systemBPFFS(t)
	}
	var agents []*lvsd
	switch s.mode {
	case "ipvsadm", "DR":
		holdVIPOnLoopback(t, vip, rss...)
	case "TUNNEL":
		holdVIPOnLoopback(t, vip, rss...)
		decapsulateIPIP(t, rss...)
	case "NAT":
		for _, rs := range rss {
			for _, src := range srcs {
				if err := rs.AddRoute(netip.PrefixFrom(src, 32), dpGateway); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if s.mode == "ipvsadm" {
		programReference(t, tp.Director(1), vip, rss, s.conntrack)
	} else {
		agents = startDataPlaneDirectors(t, tp, s, vip)
	}
	if s.toaRS {
		var directors, backends []string
		for _, a := range []string{"10.0.0.70", "10.0.0.71"} {
			directors = append(directors, strconv.Quote(a))
		}
		for _, rs := range rss {
			for _, p := range []int{dpEcho, dpBulk} {
				backends = append(backends, strconv.Quote(netip.AddrPortFrom(rs.V4, uint16(p)).String()))
			}
		}
		rsAgent := newRealServer(t, tp.RS(1), fmt.Sprintf("  client_address:\n    mode: toa\n    directors: [%s]\n    backends: [%s]\n    cgroup: %s\n",
			strings.Join(directors, ", "), strings.Join(backends, ", "), ownCgroup(t)))
		rsAgent.start()
		rsAgent.waitReady(0)
		rsAgent.waitLog(0, 15*time.Second, "op=toa-attach")
		agents = append(agents, rsAgent)
		for _, e := range echoes { // listeners keep their SYNs only when opened after the programs
			if err := e.Stop(echo.TCP, dpEcho); err != nil {
				t.Fatal(err)
			}
			if err := e.Start(echo.TCP, dpEcho); err != nil {
				t.Fatal(err)
			}
		}
		bulk.restart(t)
		r, local, err := askTracked(t.Context(), tp.Client(), srcs[0], netip.AddrPortFrom(vip, dpEcho))
		if err != nil || r.PeerName != local {
			t.Fatalf("with the real servers' programs: %+v, %v; want the client's %s", r, err, local)
		}
	}
	agentsCPU := func() (d time.Duration) {
		for _, l := range agents {
			d += cpuTime(t, l)
		}
		return d
	}
	var f dpFigures
	before := agentsCPU()
	time.Sleep(dpQuiet)
	f.agentsIdle = (agentsCPU() - before).Seconds() / dpQuiet.Seconds()
	if s.toa {
		countBPFRuns(t)
	}
	runs := bpfRuns(t, "toa_")
	before = agentsCPU()
	f.conns = openConnections(t, tp.Client(), srcs, netip.AddrPortFrom(vip, dpEcho), dpWorkers, window)
	f.agents = agentsCPU() - before
	f.programs = map[string]bpfRun{}
	for name, r := range bpfRuns(t, "toa_") {
		f.programs[name] = bpfRun{runtime: r.runtime - runs[name].runtime, count: r.count - runs[name].count}
	}
	if f.conns.conns == 0 || f.conns.failed > f.conns.conns/100 {
		t.Errorf("%s: %d connections, %d failed", s.name, f.conns.conns, f.conns.failed)
	}
	f.up = streamRate(t, tp.Client(), srcs[:2], netip.AddrPortFrom(vip, dpBulk), 'u', bulk, window)
	f.down = streamRate(t, tp.Client(), srcs[:2], netip.AddrPortFrom(vip, dpBulk), 'd', bulk, window)
	return f
}

// programReference puts vip on the director and the DR services on both
// ports in the kernel with ipvsadm, as a hand-made director would. With
// conntrack, a ruleset that uses conntrack makes the namespace track
// connections, and IPVS keeps its entries in conntrack.
func programReference(t *testing.T, director *topo.Host, vip netip.Addr, rss []*topo.Host, conntrack bool) {
	t.Helper()
	if err := director.AddAddr(netip.PrefixFrom(vip, 32), director.Link); err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{dpEcho, dpBulk} {
		svc := netip.AddrPortFrom(vip, uint16(port)).String()
		run(t, director, "ipvsadm", "-A", "-t", svc, "-s", "mh")
		for _, rs := range rss {
			run(t, director, "ipvsadm", "-a", "-t", svc, "-r", netip.AddrPortFrom(rs.V4, uint16(port)).String(), "-g", "-w", "1")
		}
	}
	if conntrack {
		if err := director.Sysctl("net/ipv4/vs/conntrack", "1"); err != nil {
			t.Fatal(err)
		}
		runInput(t, director, "table ip dpbench {\n chain pre {\n  type filter hook prerouting priority 0; policy accept;\n  ct state new counter\n }\n}\n", "nft", "-f", "-")
	}
}

// startDataPlaneDirectors starts the setup's director (with sync: two, in a
// cluster, priorities 250 and 200) with its service on both ports and its
// extra services, and waits until the VIP settled on the first.
func startDataPlaneDirectors(t *testing.T, tp *topo.Topology, s dpSetup, vip netip.Addr) []*lvsd {
	t.Helper()
	forwarding := map[string]string{
		"DR":      "forwarding: dr\n",
		"NAT":     fmt.Sprintf("forwarding: nat\nnat: {gateway: %s}\n", dpGateway),
		"FULLNAT": "forwarding: fullnat\n" + dpSNAT,
		"TUNNEL":  "forwarding: tunnel\n",
	}[s.mode]
	if s.toa {
		forwarding += "client_address: toa\n"
	}
	backends := fmt.Sprintf("backends:\n  - {address: %s}\n  - {address: %s}\n", tp.RS(1).V4, tp.RS(2).V4)
	services := map[string]string{"bench": fmt.Sprintf("service: bench\nvip: %s\nports: [%d, %d]\n%s%s",
		vip, dpEcho, dpBulk, forwarding, backends)}
	for n := range s.extra {
		services[fmt.Sprintf("x%05d", n)] = fmt.Sprintf("service: x%05d\nvip: %s\nports: [%d]\nforwarding: fullnat\n%s%s",
			n, dpExtraIP, 10000+n, dpSNAT, backends)
	}
	var ds []*lvsd
	if !s.sync { // one director alone: no peer's heartbeats in the figures
		l := newDirectorOnTmpfs(t, tp.Director(1), nil)
		for name, body := range services {
			writeFile(t, filepath.Join(l.dir, "services.d", name+".yaml"), body)
		}
		l.start()
		ds = append(ds, l)
	}
	key := clusterKey(t)
	for i, d := range tp.Directors() {
		if !s.sync {
			break
		}
		l := newClusterDirector(t, tp, d, key, fmt.Sprintf("  priority: %d\n", 250-50*i))
		for name, body := range services {
			writeFile(t, filepath.Join(l.dir, "services.d", name+".yaml"), body)
		}
		if dir := os.Getenv("LVSD_DPBENCH_PROFILE"); dir != "" {
			l.profile = filepath.Join(dir, strings.NewReplacer(" ", "", ",", "-").Replace(s.name)+"-"+d.ID+".pprof")
		}
		l.start()
		ds = append(ds, l)
	}
	for _, l := range ds {
		l.waitLog(0, time.Minute+time.Duration(s.extra)*20*time.Millisecond, "msg=reconciled")
	}
	if h := settle(t, tp, vip, 2*time.Second, time.Minute); h != tp.Director(1).ID {
		t.Fatalf("%s settled on %s, want %s", vip, h, tp.Director(1).ID)
	}
	if s.toa {
		director := tp.Director(1)
		waitFor(t, 15*time.Second, "the TOA program on "+director.Link, func() bool {
			out, _ := director.Run(t.Context(), "tc", "filter", "show", "dev", director.Link, "ingress")
			return strings.Contains(out, "lvsd_toa")
		})
	}
	return ds
}

// dpTable prints each setup's medians with ratios to the first setup's.
func dpTable(setups []dpSetup, got map[string][]dpFigures) string {
	med := func(fs []dpFigures, f func(dpFigures) float64) (m, lo, hi float64) {
		var xs []float64
		for _, x := range fs {
			xs = append(xs, f(x))
		}
		if len(xs) == 0 {
			return 0, 0, 0
		}
		slices.Sort(xs)
		if n := len(xs); n%2 == 0 {
			m = (xs[n/2-1] + xs[n/2]) / 2
		} else {
			m = xs[n/2]
		}
		return m, xs[0], xs[len(xs)-1]
	}
	rate := func(f dpFigures) float64 { return f.conns.perSecond() }
	cpu := dpFigures.dataPathPerConn
	up := func(f dpFigures) float64 { return f.up / 1e6 }
	down := func(f dpFigures) float64 { return f.down / 1e6 }
	ref := got[setups[0].name]
	refRate, _, _ := med(ref, rate)
	refCPU, _, _ := med(ref, cpu)
	refUp, _, _ := med(ref, up)
	refDown, _, _ := med(ref, down)
	var b strings.Builder
	fmt.Fprintf(&b, "%-44s %16s %6s %14s %6s %14s %18s %6s %18s %6s\n", "setup", "new conn/s", "×ref", "data path µs", "×ref", "lvsd % idle→", "up MB/s", "×ref", "down MB/s", "×ref")
	for _, s := range setups {
		fs := got[s.name]
		r, rlo, rhi := med(fs, rate)
		c, _, _ := med(fs, cpu)
		ai, _, _ := med(fs, func(f dpFigures) float64 { return 100 * f.agentsIdle })
		al, _, _ := med(fs, func(f dpFigures) float64 { return 100 * f.agentsLoad() })
		u, ulo, uhi := med(fs, up)
		d, dlo, dhi := med(fs, down)
		fmt.Fprintf(&b, "%-44s %5.0f (%4.0f–%4.0f) %6.2f %14.0f %6.2f %6.1f→%6.1f %5.1f (%5.1f–%5.1f) %6.2f %5.1f (%5.1f–%5.1f) %6.2f\n",
			s.name, r, rlo, rhi, r/refRate, c, c/refCPU, ai, al, u, ulo, uhi, u/refUp, d, dlo, dhi, d/refDown)
	}
	return b.String()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// dpPrograms says, per setup with TOA, what the kernel counted for each of
// its programs while the connections were opened: runs and time per
// connection, and that time as a share of the data path's CPU time per
// connection, the precise figure a rate measured under the VM's noise
// cannot give.
func dpPrograms(setups []dpSetup, got map[string][]dpFigures) string {
	var b strings.Builder
	for _, s := range setups {
		if !s.toa {
			continue
		}
		total := map[string]bpfRun{}
		conns := 0
		var dataPath float64
		for _, f := range got[s.name] {
			conns += f.conns.conns
			dataPath += f.dataPathPerConn() * float64(f.conns.conns)
			for name, r := range f.programs {
				t := total[name]
				t.runtime, t.count = t.runtime+r.runtime, t.count+r.count
				total[name] = t
			}
		}
		if conns == 0 {
			continue
		}
		dataPath /= float64(conns)
		for _, name := range slices.Sorted(maps.Keys(total)) {
			r := total[name]
			if r.count == 0 {
				continue
			}
			perConn := float64(r.runtime.Microseconds()) / float64(conns)
			fmt.Fprintf(&b, "%s: %s %.1f runs per connection, %.0f ns each, %.1f µs per connection = %.2f %% of the data path's %.0f µs\n",
				s.name, name, float64(r.count)/float64(conns), float64(r.runtime.Nanoseconds())/float64(r.count), perConn, 100*perConn/dataPath, dataPath)
		}
	}
	return b.String()
}
