// Command healthbench measures what the health checks cost the agent: it
// starts many HTTP backends on loopback addresses (127.1.x.y, which Linux
// answers without configuration) in a child process, checks each of them
// with agent/health every interval with the weight header, and reports the
// CPU time and memory of the checking process only. No VM is needed.
//
//	go run ./e2e/healthbench                    # 1,000 backends, 1 s, 40 s
//	go run ./e2e/healthbench -reuse 1           # a new connection every round
//	go run ./e2e/healthbench -https -n 2000 -duration 60s
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/agent/health"
)

func main() {
	n := flag.Int("n", 1000, "backends")
	port := flag.Int("port", 18080, "port of every backend")
	interval := flag.Duration("interval", time.Second, "check interval")
	timeout := flag.Duration("timeout", 500*time.Millisecond, "check timeout")
	warmup := flag.Duration("warmup", 5*time.Second, "time before measuring (first rounds are jittered over one interval)")
	duration := flag.Duration("duration", 40*time.Second, "measured time")
	reuse := flag.Int("reuse", health.DefaultReuse, "rounds an HTTP connection serves (1: a new one every round)")
	https := flag.Bool("https", false, "HTTPS backends (self-signed; checked without verification)")
	serve := flag.Bool("serve", false, "internal: be the backends' process")
	live := flag.Int("live", 0, "MiB of pointer-rich live heap the checker holds, as a director's state does (113 MiB at 10,000 services)")
	gogc := flag.Int("gogc", 0, "the checker's GOGC (0: the runtime's, or the environment's)")
	flag.Parse()
	if *gogc != 0 {
		debug.SetGCPercent(*gogc)
	}
	state = liveHeap(*live)
	var err error
	if *serve {
		err = serveBackends(*n, *port, *https)
	} else {
		err = bench(config{*n, *port, *interval, *timeout, *warmup, *duration, *reuse, *https})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthbench:", err)
		os.Exit(1)
	}
}

// backend is the i-th loopback address: 127.1.0.1 ... 127.1.0.250,
// 127.1.1.1 ...
func backend(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(1 + i%250)})
}

// wantWeight is what backend i reports, so that the checker's parsing is
// verified too.
func wantWeight(i int) int { return 1 + i%1000 }

// serveBackends is the child: n HTTP servers, then "ready" on stdout. Each
// line read from stdin is answered with the number of requests served so
// far; EOF on stdin ends the process.
func serveBackends(n, port int, https bool) error {
	var served atomic.Int64
	var tlsConfig *tls.Config
	if https {
		cert, err := selfSigned()
		if err != nil {
			return err
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	for i := range n {
		l, err := net.Listen("tcp", netip.AddrPortFrom(backend(i), uint16(port)).String())
		if err != nil {
			return err
		}
		weight := strconv.Itoa(wantWeight(i))
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				w.Header().Set(health.WeightHeader, weight)
				io.WriteString(w, "ok\n")
			}),
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       time.Minute,
		}
		if tlsConfig != nil {
			l = tls.NewListener(l, tlsConfig)
		}
		go srv.Serve(l)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(served.Load())
	}
	return nil
}

// child is the backends' process, driven over its stdin and stdout.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startChild(n, port int, https bool) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-serve", "-n", strconv.Itoa(n), "-port", strconv.Itoa(port), "-https="+strconv.FormatBool(https))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	if !c.out.Scan() || c.out.Text() != "ready" {
		c.stop()
		return nil, errors.New("backends did not start")
	}
	return c, nil
}

func (c *child) served() (int64, error) {
	fmt.Fprintln(c.in, "count")
	if !c.out.Scan() {
		return 0, errors.New("backends process gone")
	}
	return strconv.ParseInt(c.out.Text(), 10, 64)
}

func (c *child) stop() {
	c.in.Close()
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

type config struct {
	n, port                             int
	interval, timeout, warmup, duration time.Duration
	reuse                               int
	https                               bool
}

func bench(cfg config) error {
	n, port, interval := cfg.n, cfg.port, cfg.interval
	c, err := startChild(n, port, cfg.https)
	if err != nil {
		return err
	}
	defer c.stop()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := health.NewMonitor(log, health.WithReuse(cfg.reuse))
	scheme := "http"
	if cfg.https {
		scheme = "https"
	}
	targets := make([]health.Target, n)
	for i := range targets {
		targets[i] = health.Target{
			Key: fmt.Sprintf("bench/%s:%d", backend(i), port), Addr: backend(i), Port: uint16(port),
			Rise: 2, Fall: 3,
			Checks: []health.Check{{Type: scheme, Path: "/healthz", Interval: interval, Timeout: cfg.timeout,
				WeightHeader: true, InsecureTLS: true}},
		}
	}
	m.Set(targets)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	fmt.Printf("healthbench: %d %s backends (child pid %d), checked every %v (timeout %v) with %s, connection reuse %d; %d CPUs, GOMAXPROCS %d, %s\n",
		n, strings.ToUpper(scheme), c.cmd.Process.Pid, interval, cfg.timeout, health.WeightHeader, cfg.reuse,
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	time.Sleep(cfg.warmup)

	served0, err := c.served()
	if err != nil {
		return err
	}
	var gc0 runtime.MemStats
	runtime.ReadMemStats(&gc0)
	ru0, t0 := rusage(), time.Now()
	var maxFDs, maxGoroutines, maxTimeWait int
	for end := t0.Add(cfg.duration); time.Now().Before(end); {
		time.Sleep(time.Second)
		maxFDs = max(maxFDs, countFDs())
		maxGoroutines = max(maxGoroutines, runtime.NumGoroutine())
		maxTimeWait = max(maxTimeWait, timeWait())
	}
	ru1, wall := rusage(), time.Since(t0)
	var gc1 runtime.MemStats
	runtime.ReadMemStats(&gc1)
	served1, err := c.served()
	if err != nil {
		return err
	}
	snap := m.Snapshot()
	cancel()
	<-done

	cpu := time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()) + time.Duration(ru1.Stime.Nano()-ru0.Stime.Nano())
	user := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano())
	checks := served1 - served0
	healthy, weighted, failedOnce := 0, 0, 0
	errs := map[string]bool{}
	for i := range targets {
		st := snap[targets[i].Key]
		if st.Known && st.Healthy {
			healthy++
		}
		if st.LastError != "" {
			failedOnce++
			errs[st.LastError] = true
		}
		if st.Weight == wantWeight(i) {
			weighted++
		}
	}
	fmt.Printf("measured %v: %d checks (%.0f/s, expected %.0f/s)\n", wall.Round(time.Millisecond), checks,
		float64(checks)/wall.Seconds(), float64(n)/interval.Seconds())
	fmt.Printf("checker CPU: %.2f%% of one core (user %.2f%%, system %.2f%%), %.1f µs per check\n",
		pct(cpu, wall), pct(user, wall), pct(cpu-user, wall), float64(cpu.Microseconds())/float64(max(checks, 1)))
	fmt.Printf("checker memory: max RSS %.1f MiB, RSS now %s; max %d open fds, max %d goroutines\n",
		float64(ru1.Maxrss)/1024, vmRSS(), maxFDs, maxGoroutines)
	fmt.Printf("collector: GOGC %d, %d cycles (%.1f/s), %.0f MiB allocated, live heap held %d MiB, heap in use now %.0f MiB\n",
		gcPercent(), gc1.NumGC-gc0.NumGC, float64(gc1.NumGC-gc0.NumGC)/wall.Seconds(),
		float64(gc1.TotalAlloc-gc0.TotalAlloc)/(1<<20), len(state)*96>>20, float64(gc1.HeapInuse)/(1<<20))
	fmt.Printf("TIME_WAIT sockets on the host (both ends): max %d\n", maxTimeWait)
	fmt.Printf("targets healthy: %d/%d, weight from header as served: %d/%d, ever failed a round: %d\n",
		healthy, n, weighted, n, failedOnce)
	for e := range errs {
		fmt.Println("  failure:", e)
	}
	if healthy != n || weighted != n {
		return errors.New("not every target was healthy with its weight")
	}
	return nil
}

func pct(d, wall time.Duration) float64 { return 100 * d.Seconds() / wall.Seconds() }

// gcPercent reads GOGC as the runtime has it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// state is the live heap of -live, kept reachable for the whole run.
var state []*stateNode

type stateNode struct {
	next *stateNode
	_    [88]byte // a small object's size, like a director's
}

// liveHeap allocates mib MiB of small linked objects, which the collector
// must mark on every cycle as it marks a director's services.
func liveHeap(mib int) []*stateNode {
	out := make([]*stateNode, mib<<20/96)
	for i := range out {
		out[i] = &stateNode{}
		if i > 0 {
			out[i].next = out[i-1]
		}
	}
	return out
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

func countFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

func vmRSS() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// timeWait is the host's number of TIME_WAIT TCP sockets, from
// /proc/net/sockstat: cheap to read, unlike /proc/net/tcp, whose
// formatting of thousands of sockets would be charged to the checker.
func timeWait() int {
	b, _ := os.ReadFile("/proc/net/sockstat")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[0] == "TCP:" && f[i] == "tw" {
				n, _ := strconv.Atoi(f[i+1])
				return n
			}
		}
	}
	return -1
}

// selfSigned makes a throwaway certificate for the HTTPS backends.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "healthbench"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 1, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
