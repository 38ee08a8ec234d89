package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// The ports the real servers answer the checks on: every service's
// backends are checked on checkPort but the first service's, checked on
// flapPort, which the first real server stops answering to fail one
// backend's check only.
const (
	checkPort = 8080
	flapPort  = 8081
)

// health is a service's health block under -health ("" without).
func health(service int) string {
	switch {
	case healthType == "":
		return ""
	case service == 0: // the flapping one: a failing check counts at once
		return fmt.Sprintf("health: {interval: 1s, timeout: 500ms, rise: 1, fall: 1, checks: [{type: tcp, port: %d}]}\n", flapPort)
	}
	return fmt.Sprintf("health: {interval: %s, checks: [{type: tcp, port: %d}]}\n", healthInterval, checkPort)
}

// vmChecksPerSecond is the rate of checks the bench asks of the VM at
// most, unless told an interval: the 2-vCPU TCG VM makes about 200 new TCP
// connections a second through a director (make dpbench), and the checks
// get half of that, so that lvsd's passes and the bench's own measuring
// keep the rest. A check is a connection here: its SYN, the real server's
// accept and close.
const vmChecksPerSecond = 100

// checkInterval is the interval that keeps targets checks within
// vmChecksPerSecond, a minute at least, in whole seconds.
func checkInterval(targets int) time.Duration {
	d := time.Duration(targets) * time.Second / vmChecksPerSecond
	return max(time.Minute, d.Round(time.Second))
}

// pickInterval is -health-interval, or checkInterval(targets) without it.
func pickInterval(targets int) time.Duration {
	if healthIntervalFlag > 0 {
		return healthIntervalFlag
	}
	return checkInterval(targets)
}

// checksAsked is the rate of checks of targets at healthInterval.
func checksAsked(targets int) float64 {
	return float64(targets) / healthInterval.Seconds()
}

// checkRate is the rate of checks asked of one lvsd and the rate its
// real servers answered while it ran.
type checkRate struct{ asked, answered float64 }

// reachedChecks is the rate of checks of targets answered: answered over
// took, against what healthInterval asks.
func reachedChecks(targets int, answered uint64, took time.Duration) checkRate {
	r := checkRate{asked: checksAsked(targets), answered: float64(answered) / took.Seconds()}
	fmt.Printf("health checks: %.0f/s asked, %.0f/s answered by the real servers over %.0fs (%.0f%%)\n",
		r.asked, r.answered, took.Seconds(), 100*r.answered/r.asked)
	if r.answered < 0.9*r.asked {
		fmt.Printf("health checks: this VM does not keep up with %.0f checks/s: lvsd delays rounds (its log: event=health_delayed); use a longer -health-interval (0 picks one)\n",
			r.asked)
	}
	return r
}

// checkServers answer the TCP checks: a listener on checkPort and one on
// flapPort in every real server, accepting and closing.
type checkServers struct {
	addrs []string // the real servers' addresses: the backends
	hosts []*topo.Host
	mu    sync.Mutex
	lns   []net.Listener
	wg    sync.WaitGroup
	flap  net.Listener  // the first real server's flapPort; nil while failed
	count atomic.Uint64 // connections accepted on checkPort
}

// answered is how many checks the real servers answered on checkPort.
func (s *checkServers) answered() uint64 { return s.count.Load() }

func serveChecks(hosts []*topo.Host) (*checkServers, error) {
	s := &checkServers{hosts: hosts}
	for _, h := range hosts {
		s.addrs = append(s.addrs, h.V4.String())
		for _, port := range []int{checkPort, flapPort} {
			ln, err := s.listen(h, port)
			if err != nil {
				s.close()
				return nil, err
			}
			if h == hosts[0] && port == flapPort {
				s.flap = ln
			}
		}
	}
	return s, nil
}

func (s *checkServers) listen(h *topo.Host, port int) (net.Listener, error) {
	ln, err := h.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, fmt.Errorf("check server on %s: %w", h.Name, err)
	}
	s.mu.Lock()
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if port == checkPort {
				s.count.Add(1)
			}
			c.Close()
		}
	})
	return ln, nil
}

// failFlap stops answering the first real server's flapPort: its
// connections are refused.
func (s *checkServers) failFlap() error {
	err := s.flap.Close()
	s.flap = nil
	return err
}

// restoreFlap answers it again.
func (s *checkServers) restoreFlap() (err error) {
	s.flap, err = s.listen(s.hosts[0], flapPort)
	return err
}

func (s *checkServers) close() {
	s.mu.Lock()
	for _, ln := range s.lns {
		ln.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// healthFlap is what one backend's failing check and its recovery cost:
// from the check's change (the real server stops or starts answering) to
// lvsd logging the new verdict (detection: up to an interval), and from
// that to the kernel reconciled; with several directors, the slowest's.
type healthFlap struct {
	failDetect, failReconciled time.Duration
	failPass                   time.Duration // the reconciling pass, as lvsd logs its duration
	riseDetect, riseReconciled time.Duration
	failKernel, riseKernel     time.Duration // from the change to the kernel changed
}

// flapBackend fails the check of the first real server in the first
// service (listening on vip:port), waits for every director's lvsd (ls,
// on hosts) to set its destination's weight to 0 in the kernel, then lets
// it pass again and waits for weight 1. Each wait ends at the first pass
// that applied an operation, checked against ipvsadm's table.
func flapBackend(ls []*lvsd, hosts []*topo.Host, s *checkServers, vip string, port int) (*healthFlap, error) {
	out := &healthFlap{}
	target := fmt.Sprintf("target=svc0/%s ", s.addrs[0])
	for _, step := range []struct {
		what      string
		change    func() error
		msg       string
		weight    int
		detect    *time.Duration
		reconcile *time.Duration
		pass      *time.Duration
		kernel    *time.Duration
	}{
		{"fails", s.failFlap, `msg="target unhealthy"`, 0, &out.failDetect, &out.failReconciled, &out.failPass, &out.failKernel},
		{"passes again", s.restoreFlap, `msg="target healthy"`, 1, &out.riseDetect, &out.riseReconciled, nil, &out.riseKernel},
	} {
		start := time.Now()
		if err := step.change(); err != nil {
			return nil, err
		}
		type result struct {
			detect, reconcile, pass time.Duration
			err                     error
		}
		results := make(chan result, len(ls))
		for i, l := range ls {
			go func() {
				var r result
				r.detect, r.reconcile, r.pass, r.err = awaitVerdict(l, start, step.msg, target, fmt.Sprintf("-> %s:%d ", s.addrs[0], port))
				if r.err == nil {
					r.err = destinationWeight(hosts[i], vip, port, s.addrs[0], step.weight)
				}
				if r.err == nil {
					fmt.Printf("backend %s of svc0 %s: %s's verdict after %.3fs, its kernel changed %.3fs after the change (%+.3fs from the verdict)\n",
						s.addrs[0], step.what, hosts[i].ID, r.detect.Seconds(), (r.detect + r.reconcile).Seconds(), r.reconcile.Seconds())
				}
				results <- r
			}()
		}
		var errs []error
		for range ls {
			r := <-results
			errs = append(errs, r.err)
			*step.detect, *step.reconcile = max(*step.detect, r.detect), max(*step.reconcile, r.reconcile)
			*step.kernel = max(*step.kernel, r.detect+r.reconcile)
			if step.pass != nil {
				*step.pass = max(*step.pass, r.pass)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// awaitVerdict reads lvsd's log from start until it has logged both the
// verdict msg about target and the end of a pass that applied an
// operation on the destination (dest: "-> addr:port "), and returns the time from start to
// the verdict, from the verdict to that pass's end (by the lines' own
// time stamps), and the pass's logged duration. Under ECMP the pass may
// come first (a negative time): the other directors' votes can change the
// table before this one's own check fails.
func awaitVerdict(l *lvsd, start time.Time, msg, target, dest string) (detect, reconcile, pass time.Duration, err error) {
	deadline := time.After(time.Minute)
	var verdictAt, kernelAt time.Time
	applied := false
	for verdictAt.IsZero() || kernelAt.IsZero() {
		line, err := l.nextLine(deadline, fmt.Sprintf("logging %s %sand a pass changing %s", msg, target, dest))
		if err != nil {
			return 0, 0, 0, err
		}
		if strings.Contains(line, "level=ERROR") {
			return 0, 0, 0, fmt.Errorf("lvsd: %s", line)
		}
		at, ok := loggedAt(line)
		if !ok || at.Before(start) {
			continue
		}
		switch {
		case strings.Contains(line, msg) && strings.Contains(line, target):
			if verdictAt.IsZero() {
				verdictAt = at
				fmt.Printf("    lvsd: %s\n", line[strings.Index(line, "msg="):])
			}
		case strings.Contains(line, "msg=applied") && strings.Contains(line, dest):
			applied = true
		case strings.Contains(line, "msg=reconciled"):
			if applied && kernelAt.IsZero() {
				kernelAt = at
				if pass, err = loggedDuration(line); err != nil {
					return 0, 0, 0, err
				}
				fmt.Printf("    lvsd: %s\n", line[strings.Index(line, "msg="):])
			}
			applied = false
		}
	}
	return verdictAt.Sub(start), kernelAt.Sub(verdictAt), pass, nil
}

// destinationWeight checks the kernel's weight of a destination.
func destinationWeight(director *topo.Host, vip string, port int, addr string, want int) error {
	cmd := exec.CommandContext(context.Background(), "ipvsadm", "-Ln", "-t", fmt.Sprintf("%s:%d", vip, port))
	text, err := runIn(director, cmd)
	if err != nil {
		return fmt.Errorf("ipvsadm -Ln: %v: %s", err, text)
	}
	dest := fmt.Sprintf("%s:%d", addr, port)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "->" && f[1] == dest {
			if f[3] != fmt.Sprint(want) {
				return fmt.Errorf("destination %s of %s:%d has weight %s in the kernel, want %d", dest, vip, port, f[3], want)
			}
			return nil
		}
	}
	return errors.New("no destination " + dest + " in the kernel: " + text)
}

// printHealth prints the health rows of a -health run.
func printHealth(rows []row) {
	if healthType == "" {
		return
	}
	fmt.Printf("\nhealth (a %s check on every backend, every %v at the last size; one backend's check fails and passes again):\n", healthType, healthInterval)
	fmt.Println("services  checks/s asked  answered  RSS MiB  idle CPU  fail: verdict  → reconciled  (pass)  rise: verdict  → reconciled")
	for _, r := range rows {
		if r.flap == nil {
			continue
		}
		f := r.flap
		fmt.Printf("%8d  %14.0f  %8.0f  %7.1f  %7.2f%%  %12.3fs  %11.3fs  %5.3fs  %12.3fs  %11.3fs\n", r.services, r.checks.asked, r.checks.answered,
			float64(r.rssKiB)/1024, 100*r.idleCPU,
			f.failDetect.Seconds(), f.failReconciled.Seconds(), f.failPass.Seconds(), f.riseDetect.Seconds(), f.riseReconciled.Seconds())
	}
}
