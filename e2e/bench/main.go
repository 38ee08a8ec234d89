// Command lvsd-bench measures lvsd against ipvsadm -R inside the test VM
// (`make bench`): for each size, a cold apply of many services with many
// real servers each, one file per service; then, on the last round, one
// weight changed in one file (edit → reconciled; and a SIGHUP), lvsd's memory,
// its idle CPU and `lvsd status`; with -health tcp, a TCP health check
// on every backend, served by real servers, and one backend's check
// failing and passing again (check fails → kernel reconciled). Both tools program the same set in the
// same network namespace in one run, so the ratios are what count;
// absolute times under emulation are noise. It ends with the scale table
// of docs/performance.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/e2e/topo"
)

const vip = "10.0.0.50"

// profile, idleProfile, reference, healthType and fullNAT are the flags of
// those names; healthInterval is -health-interval, or the one checkInterval
// picks for the size measured when it is 0.
var (
	profile, idleProfile string
	reference            bool
	healthType           string
	fullNAT              bool
	healthInterval       time.Duration
	healthIntervalFlag   time.Duration
)

func main() {
	lvsdBin := flag.String("lvsd", "bin/lvsd", "the lvsd binary")
	sizes := flag.String("services", "1000", "service counts to measure, comma-separated (one port and one file each)")
	backends := flag.Int("backends", 10, "real servers per service")
	rounds := flag.Int("rounds", 2, "measurements of each tool per size")
	idle := flag.Duration("idle", 20*time.Second, "window for lvsd's idle CPU")
	flag.StringVar(&profile, "profile", "", "write a CPU profile of lvsd's last run of each size to FILE.SIZE (LVSD_CPU_PROFILE) and its heap after the idle windows to FILE.heap.SIZE")
	flag.StringVar(&idleProfile, "idle-profile", "", "instead of -profile's CPU profile, one of the second idle window to FILE.SIZE (with -ecmp, the first director's, to FILE.ecmp.SIZE)")
	flag.BoolVar(&reference, "reference", true, "also time ipvsadm -R of the same set (false: lvsd alone, for profiling)")
	flag.StringVar(&healthType, "health", "", "\"tcp\": every backend gets a TCP health check that real servers answer, and one backend's check fails and passes again (\"\": no health checks)")
	ecmp := flag.Bool("ecmp", false, "instead: three directors in cluster mode ecmp voting on health, each with the services and checks of -health tcp (required)")
	flag.BoolVar(&fullNAT, "fullnat", false, "with -ecmp: FULLNAT services (each director its own source address, connection sync on) instead of DR")
	flag.DurationVar(&healthIntervalFlag, "health-interval", 0, fmt.Sprintf("with -health, the checks' interval (all services but the first, whose backend fails); 0: a minute, or longer where that asks more than %d checks a second of the VM (at 10,000 × 10: %v)", vmChecksPerSecond, checkInterval(100_000)))
	flag.Parse()
	if healthType != "" && healthType != "tcp" {
		fmt.Fprintf(os.Stderr, "bench: -health %q: want tcp or nothing\n", healthType)
		os.Exit(2)
	}
	if fullNAT && !*ecmp {
		fmt.Fprintln(os.Stderr, "bench: -fullnat is for -ecmp (the single-director bench compares DR with ipvsadm -R)")
		os.Exit(2)
	}
	if *ecmp && healthType == "" {
		fmt.Fprintln(os.Stderr, "bench: -ecmp measures the health vote: it needs -health tcp")
		os.Exit(2)
	}
	// The VM reads the host's files over 9p: the first exec of lvsd would
	// page its 26 MB in at emulated speed inside the first cold start,
	// which ipvsadm (100 KB) does not pay. Read it once, as a host that has
	// lvsd installed finds it in its page cache or on a local disk.
	start := time.Now()
	if _, err := os.ReadFile(*lvsdBin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Printf("read %s once before timing it: %.2fs\n", *lvsdBin, time.Since(start).Seconds())
	var rows []row
	var ecmpRows []ecmpRow
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: -services %q: want counts like 1000,5000,10000\n", *sizes)
			os.Exit(2)
		}
		if *ecmp {
			r, err := benchECMP(*lvsdBin, n, *backends, *idle)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench failed:", err)
				os.Exit(1)
			}
			ecmpRows = append(ecmpRows, r)
			continue
		}
		r, err := bench(*lvsdBin, n, *backends, *rounds, *idle)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench failed:", err)
			os.Exit(1)
		}
		rows = append(rows, r)
	}
	if *ecmp {
		printECMP(ecmpRows)
		return
	}
	printTable(rows, *backends)
	printHealth(rows)
}

// row is one size's figures.
type row struct {
	services        int
	lvsd, ipvsadm   time.Duration // cold apply, medians
	change          time.Duration // one weight in one file: edit → (file watch) reconciled
	changeOps       int
	signal          time.Duration // one weight in one file, then SIGHUP → reconciled (every file stat'ed)
	rssKiB          int
	anonKiB         int     // of rssKiB
	peakKiB         int     // VmHWM: the cold start's peak
	idleCPU         float64 // share of one core
	status          time.Duration
	statusAll       time.Duration
	statusAllOutput int
	flap            *healthFlap // with -health
	checks          checkRate   // with -health
}

func printTable(rows []row, backends int) {
	fmt.Printf("\nscale table (× %d real servers, one file per service; ratios against ipvsadm -R of the same set):\n", backends)
	fmt.Println("services  lvsd cold  ipvsadm -R  ratio  one change  (ops)  change/cold  SIGHUP  RSS MiB  (anon)  peak MiB  idle CPU  status  status --all")
	for _, r := range rows {
		fmt.Printf("%8d  %8.2fs  %9.2fs  %5.2f  %9.3fs  %5d  %10.2f%%  %5.2fs  %7.1f  %6.1f  %8.1f  %7.2f%%  %5.2fs  %6.2fs\n",
			r.services, r.lvsd.Seconds(), r.ipvsadm.Seconds(), r.lvsd.Seconds()/r.ipvsadm.Seconds(),
			r.change.Seconds(), r.changeOps, 100*r.change.Seconds()/r.lvsd.Seconds(), r.signal.Seconds(),
			float64(r.rssKiB)/1024, float64(r.anonKiB)/1024, float64(r.peakKiB)/1024, 100*r.idleCPU, r.status.Seconds(), r.statusAll.Seconds())
	}
}

func bench(lvsdBin string, nServices, nBackends, rounds int, idle time.Duration) (row, error) {
	out := row{services: nServices}
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Printf("\nlvsd benchmark: %d services × %d real servers (mh, DR), one file each, kernel %s", nServices, nBackends, kernel)
	realServers := 0
	if healthType != "" {
		realServers = nBackends // they answer the checks
	}
	tp, err := topo.Build(topo.WithRealServers(realServers), topo.WithClientSources(0))
	if err != nil {
		return out, err
	}
	defer tp.Close()
	director := tp.Director(1)
	addrs := backendAddrs(nBackends)
	var servers *checkServers
	if healthType != "" {
		if servers, err = serveChecks(tp.RealServers()); err != nil {
			return out, err
		}
		defer servers.close()
		addrs = servers.addrs
		healthInterval = pickInterval(nServices * nBackends)
		fmt.Printf("health: a tcp check on every backend every %v (%.0f checks/s asked), answered by %d real servers\n",
			healthInterval, checksAsked(nServices*nBackends), len(addrs))
	}

	dir, err := os.MkdirTemp("", "lvsd-bench")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(dir)
	servicesDir := filepath.Join(dir, "services.d")
	os.MkdirAll(servicesDir, 0o755)
	files, restore := generate(vip, "", nServices, addrs)
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(servicesDir, name), []byte(body), 0o644); err != nil {
			return out, err
		}
	}
	agentFile := filepath.Join(dir, "lvsd.yaml")
	os.WriteFile(agentFile, []byte(fmt.Sprintf("node: bench\ninterface: %s\nservices_dir: services.d\nstate_dir: state\napi: {socket: %s}\n",
		director.Link, filepath.Join(dir, "lvsd.sock"))), 0o644)

	var lvsdTimes, refTimes []time.Duration
	for r := 0; r < rounds; r++ {
		if err := reset(director, dir); err != nil {
			return out, err
		}
		var env []string
		if profile != "" && idleProfile == "" && r == rounds-1 {
			env = []string{fmt.Sprintf("LVSD_CPU_PROFILE=%s.%d", profile, nServices)}
		}
		l, elapsed, err := startLVSD(director, lvsdBin, agentFile, env...)
		if l != nil {
			l.socket = filepath.Join(dir, "lvsd.sock")
		}
		if err != nil {
			return out, err
		}
		lvsdTimes = append(lvsdTimes, elapsed)
		if r == rounds-1 {
			var answered uint64
			if servers != nil {
				answered = servers.answered()
			}
			at := time.Now()
			if err := measureRunning(&out, l, lvsdBin, agentFile, servicesDir, addrs[0], idle); err != nil {
				l.stop()
				return out, err
			}
			if servers != nil {
				out.checks = reachedChecks(nServices*nBackends, servers.answered()-answered, time.Since(at))
			}
			if servers != nil {
				if out.flap, err = flapBackend([]*lvsd{l}, []*topo.Host{director}, servers, vip, 1000); err != nil {
					l.stop()
					return out, err
				}
			}
		}
		l.stop()
		if !reference {
			refTimes = append(refTimes, 0)
			continue
		}

		if err := reset(director, dir); err != nil {
			return out, err
		}
		start := time.Now()
		cmd := exec.Command("ipvsadm", "-R")
		cmd.Stdin = strings.NewReader(restore)
		if out, err := runIn(director, cmd); err != nil {
			return row{}, fmt.Errorf("ipvsadm -R: %v: %s", err, out)
		}
		refTimes = append(refTimes, time.Since(start))
		fmt.Printf("round %d: lvsd cold apply %.2fs, ipvsadm -R %.2fs\n", r+1, lvsdTimes[r].Seconds(), refTimes[r].Seconds())
	}
	out.lvsd, out.ipvsadm = median(lvsdTimes), median(refTimes)
	fmt.Printf("cold apply, median of %d: lvsd %.2fs, ipvsadm -R %.2fs, ratio lvsd/ipvsadm = %.2f\n",
		rounds, out.lvsd.Seconds(), out.ipvsadm.Seconds(), out.lvsd.Seconds()/out.ipvsadm.Seconds())
	return out, reset(director, dir)
}

// measureRunning takes the figures of a running, reconciled lvsd: memory,
// idle CPU, lvsd status, one weight change.
func measureRunning(out *row, l *lvsd, bin, agentFile, servicesDir, edited string, idle time.Duration) error {
	pid := l.cmd.Process.Pid
	// Right after the cold start the process still returns its start-up
	// garbage; the figures kept are those of a later window.
	for i, what := range []string{"right after the start", "after that"} {
		m := residentSet(pid)
		out.rssKiB, out.anonKiB, out.peakKiB = m.rss, m.anon, m.peak
		parts := m.parts
		before, at := cpuTicks(pid), time.Now()
		if i == 1 && idleProfile != "" {
			if err := saveProfile(l.socket, fmt.Sprintf("profile?seconds=%d", int(idle.Seconds())), fmt.Sprintf("%s.%d", idleProfile, out.services)); err != nil {
				return err
			}
		} else {
			time.Sleep(idle)
		}
		out.idleCPU = float64(cpuTicks(pid)-before) / 100 / time.Since(at).Seconds() // USER_HZ 100
		fmt.Printf("idle window %d (%s): RSS %.1f MiB at its start (%s), CPU %.2f%% of a core over %v\n",
			i+1, what, float64(out.rssKiB)/1024, parts, 100*out.idleCPU, idle)
	}
	for _, args := range [][]string{{"status"}, {"status", "--all"}} {
		start := time.Now()
		cmd := exec.Command(bin, append(args, "--config", agentFile)...)
		text, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("lvsd %s: %v: %s", strings.Join(args, " "), err, text)
		}
		if len(args) == 1 {
			out.status = time.Since(start)
		} else {
			out.statusAll, out.statusAllOutput = time.Since(start), len(text)
		}
	}
	if profile != "" {
		for what, file := range map[string]string{"heap?gc=1": "heap", "heap?debug=1": "heap.txt"} { // .txt: with the runtime's MemStats
			if err := saveProfile(l.socket, what, fmt.Sprintf("%s.%s.%d", profile, file, out.services)); err != nil {
				return err
			}
		}
	}
	fmt.Printf("running: RSS %.1f MiB, idle CPU %.2f%% of a core over %v, lvsd status %.2fs, status --all %.2fs (%d bytes)\n",
		float64(out.rssKiB)/1024, 100*out.idleCPU, idle, out.status.Seconds(), out.statusAll.Seconds(), out.statusAllOutput)
	var err error
	out.change, out.changeOps, out.signal, err = weightChange(l, servicesDir, edited)
	if err != nil {
		return err
	}
	// The resident set once status requests, edits and SIGHUPs have run
	// their code too: what a director that is operated holds, not only a
	// director left alone after its start.
	time.Sleep(10 * time.Second)
	m := residentSet(pid)
	fmt.Printf("after status, the edits and the SIGHUPs: RSS %.1f MiB (%s)\n", float64(m.rss)/1024, m.parts)
	return nil
}

// saveProfile writes the runtime profile lvsd's control socket serves
// under /debug/pprof/what to file.
func saveProfile(socket, what, file string) error {
	c := api.NewClient(socket)
	c.Timeout = 5 * time.Minute // a CPU profile answers after its seconds
	b, err := c.Fetch(context.Background(), "GET", "/debug/pprof/"+what)
	if err != nil {
		return fmt.Errorf("profile %s: %w", what, err)
	}
	return os.WriteFile(file, b, 0o644)
}

// memUse is what a process holds: its resident set size and what it is
// made of (anonymous memory: Go's heap, stacks and runtime; file pages:
// the binary's, which the kernel can drop and read again), and the peak
// resident set since it started (VmHWM), all in KiB.
type memUse struct {
	rss, anon, peak int
	parts           string // the resident set's parts, for a log line
}

// residentSet reads a process's memUse: the resident set and its
// anonymous part from /proc/PID/smaps_rollup, which counts every page
// (the kernel's per-process counters in /proc/PID/status may lag by 64
// pages a thread on older kernels), the peak from /proc/PID/status.
func residentSet(pid int) memUse {
	var m memUse
	rollup := procFields(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	m.rss, m.anon = rollup["Rss:"], rollup["Anonymous:"]
	m.peak = procFields(fmt.Sprintf("/proc/%d/status", pid))["VmHWM:"]
	mib := func(kib int) float64 { return float64(kib) / 1024 }
	m.parts = fmt.Sprintf("Anon %.1f MiB, File %.1f MiB, peak %.1f MiB, %s", mib(m.anon), mib(m.rss-m.anon), mib(m.peak), fileParts(pid))
	return m
}

// procFields reads the "Name: N kB" lines of a /proc file, in KiB.
func procFields(file string) map[string]int {
	b, _ := os.ReadFile(file)
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			if n, err := strconv.Atoi(f[1]); err == nil {
				out[f[0]] = n
			}
		}
	}
	return out
}

// fileParts says what the file pages of a process's resident set are: the
// resident KiB of its file mappings by permissions (the binary's code r-x,
// read-only data r--, data rw-).
func fileParts(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	byPerms := map[string]int{}
	var perms string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && !strings.HasSuffix(f[0], ":"):
			perms = ""
			if f[4] != "0" { // a file's
				perms = f[1][:3]
			}
		case len(f) >= 2 && f[0] == "Rss:" && perms != "":
			n, _ := strconv.Atoi(f[1])
			byPerms[perms] += n
		}
	}
	var parts []string
	for _, p := range []string{"r-x", "r--", "rw-"} {
		parts = append(parts, fmt.Sprintf("%s %.1f", p, float64(byPerms[p])/1024))
	}
	return "file pages by mapping: " + strings.Join(parts, " ") + " MiB"
}

// cpuTicks reads a process's user + system CPU time in clock ticks.
func cpuTicks(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return u + k
}

// backendAddrs are the backends of a bench without health checks:
// addresses nothing answers, 10.3.0.2 and on.
func backendAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		b := i + 1
		out[i] = fmt.Sprintf("10.3.%d.%d", b/250, b%250+1)
	}
	return out
}

// generate returns one service file per service, by name, each with the
// backends addrs (sorted), and the equivalent ipvsadm -R input, in the
// order lvsd adds destinations (sorted by address). With -health, each
// service checks its backends (health); forwarding is every service's forwarding
// lines ("": DR, as the ipvsadm -R input is).
func generate(vip, forwarding string, nServices int, addrs []string) (map[string]string, string) {
	files := map[string]string{}
	var r strings.Builder
	for s := 0; s < nServices; s++ {
		var y strings.Builder
		port := 1000 + s
		fmt.Fprintf(&y, "service: svc%d\nvip: %s\nports: [%d]\n%s%sbackends:\n", s, vip, port, forwarding, health(s))
		fmt.Fprintf(&r, "-A -t %s:%d -s mh -b mh-fallback,mh-port\n", vip, port)
		for _, addr := range addrs {
			fmt.Fprintf(&y, "  - {address: %s, weight: 1}\n", addr)
			fmt.Fprintf(&r, "-a -t %s:%d -r %s:%d -g -w 1\n", vip, port, addr, port)
		}
		files[fmt.Sprintf("svc%05d.yaml", s)] = y.String()
	}
	return files, r.String()
}

// reset empties the bench namespace's IPVS table and lvsd's state, so each
// measurement starts cold. Only the benchmark's own namespace is flushed.
func reset(director *topo.Host, dir string) error {
	os.RemoveAll(filepath.Join(dir, "state"))
	if out, err := runIn(director, exec.Command("ipvsadm", "-C")); err != nil {
		return fmt.Errorf("ipvsadm -C: %v: %s", err, out)
	}
	return nil
}

func runIn(h *topo.Host, cmd *exec.Cmd) (string, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := h.Start(cmd); err != nil {
		return "", err
	}
	err := cmd.Wait()
	return out.String(), err
}

// weightChange edits one backend's weight in one file (the first
// service's) and returns what it cost lvsd, the median of 9 edits: found by
// its file watch, as an operator's edit is, the reload and the pass that
// followed as lvsd logs their durations (the watch lets an edit settle for
// a check first: that wait is printed, not counted; a pass may include a
// step of the audit; the first edit after the idle windows finds cold
// caches), and the kernel operations an edit took. Then 3 more
// edits, each followed at once by a SIGHUP as `systemctl reload` sends it:
// the median time from the signal to reconciled, every file stat'ed. The
// file ends as it was.
func weightChange(l *lvsd, servicesDir, addr string) (change time.Duration, ops int, signal time.Duration, err error) {
	file := filepath.Join(servicesDir, "svc00000.yaml")
	orig, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, 0, err
	}
	weight := func(w int) []byte {
		return []byte(strings.Replace(string(orig), fmt.Sprintf("{address: %s, weight: 1}", addr), fmt.Sprintf("{address: %s, weight: %d}", addr, w), 1))
	}
	var changes, signals []time.Duration
	for i, w := range []int{5, 1, 5, 1, 5, 1, 5, 1, 5} {
		start := time.Now()
		if err := os.WriteFile(file, weight(w), 0o644); err != nil {
			return 0, 0, 0, err
		}
		reloaded, err := l.waitFor(2*time.Minute, `msg="configuration reloaded"`, `trigger="file change"`)
		if err != nil {
			return 0, 0, 0, err
		}
		applied, reconciled, err := l.waitReconciled(2 * time.Minute)
		if err != nil {
			return 0, 0, 0, err
		}
		wall := time.Since(start)
		load, err1 := loggedDuration(reloaded)
		pass, err2 := loggedDuration(reconciled)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, 0, err
		}
		changes, ops = append(changes, load+pass), max(ops, len(applied))
		fmt.Printf("weight change %d: reload %.3fs + pass %.3fs = %.3fs (edit → reconciled %.3fs, the watch's settling included), %d kernel operation(s)\n",
			i+1, load.Seconds(), pass.Seconds(), (load + pass).Seconds(), wall.Seconds(), len(applied))
	}
	for i, w := range []int{1, 5, 1} {
		if err := os.WriteFile(file, weight(w), 0o644); err != nil {
			return 0, 0, 0, err
		}
		start := time.Now()
		l.cmd.Process.Signal(syscall.SIGHUP)
		if _, _, err := l.waitReconciled(2 * time.Minute); err != nil {
			return 0, 0, 0, err
		}
		signals = append(signals, time.Since(start))
		fmt.Printf("weight change %d with a SIGHUP: signal → reconciled %.3fs\n", i+1, signals[i].Seconds())
	}
	return median(changes), ops, median(signals), nil
}

// loggedDuration reads the duration= of an lvsd log line.
func loggedDuration(line string) (time.Duration, error) {
	_, v, ok := strings.Cut(line, " duration=")
	if !ok {
		return 0, fmt.Errorf("no duration in %q", line)
	}
	v, _, _ = strings.Cut(v, " ")
	return time.ParseDuration(v)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
