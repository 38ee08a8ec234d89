//go:build e2e && soak

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// soakReport is what a soak run saw, checked against the invariants by
// check and printed by String.
type soakReport struct {
	seed       uint64
	duration   time.Duration
	start, end time.Time
	faults     []soakFault
	// stalls are the times a director logged that it was not scheduled
	// (the VM stalled): they excuse what a fault would, as "stall".
	stalls []soakFault

	lost       []string       // established connections that broke, with the fault they fell in
	newFails   map[string]int // failed new connections by the fault they fell in ("" outside any)
	failTimes  []string       // when each failed, the first ones
	overlaps   []string       // times a VIP was on two directors, with the fault they fell in
	errorLines []string       // ERROR log lines outside every fault's window
	resources  string         // the curves
	diagnoses  []string       // what the directors knew of each lost connection
	violations []string
}

func (r *soakReport) violation(s string) { r.violations = append(r.violations, s) }

// window is the time a fault may disturb: from its injection to one second
// after the cluster settled (to its end plus a minute if it never did).
func (f soakFault) window() (from, to time.Time) {
	to = f.settled
	if to.IsZero() {
		to = f.end.Add(time.Minute)
	}
	return f.start.Add(-500 * time.Millisecond), to.Add(time.Second)
}

// faultAt names the fault whose window holds at ("" if none): the one that
// started last, since a fault's window may reach into the next one's.
func (r *soakReport) faultAt(at time.Time) (soakFault, bool) {
	var found soakFault
	ok := false
	for _, f := range append(slices.Clip(r.faults), r.stalls...) {
		if from, to := f.window(); !at.Before(from) && !at.After(to) && (!ok || f.start.After(found.start)) {
			found, ok = f, true
		}
	}
	return found, ok
}

// overlapAllowed is how long a fault whose window holds at may leave an
// address on two directors: a killed owner's address stays until its
// lifetime runs out; after a VM stall the stalled owner needs the stall and
// a few heartbeats to see it was replaced; any other fault ends an overlap
// within a failure timeout.
func (r *soakReport) overlapAllowed(at time.Time) (time.Duration, bool) {
	var allowed time.Duration
	ok := false
	for _, f := range append(slices.Clip(r.faults), r.stalls...) {
		if from, to := f.window(); at.Before(from) || at.After(to) {
			continue
		}
		ok = true
		switch f.kind {
		case "kill":
			allowed = max(allowed, soakAddressLifetime+2*time.Second)
		case "stall":
			allowed = max(allowed, 3*time.Second)
		default:
			allowed = max(allowed, soakFailureTimeout+time.Second)
		}
	}
	return allowed, ok
}

// collect gathers what the run left in the soak's instruments.
func (r *soakReport) collect(s *soak) {
	for _, l := range s.ds {
		for _, st := range stallsIn(l.log()) {
			// A stall longer than the failure timeout declares a director
			// failed: what follows is a failover like a fault's.
			r.stalls = append(r.stalls, soakFault{kind: "stall", target: 0, start: st.from, end: st.to,
				settled: st.to.Add(3 * time.Second)})
		}
	}
	// Every fault of the schedule is one the docs promise to keep
	// established connections through, with connection sync on: a lost one
	// is a violation wherever it falls.
	for i, fl := range s.fleets {
		fl.mu.Lock()
		for _, c := range fl.conns {
			if c.err == nil {
				continue
			}
			in := "no fault"
			if f, ok := r.faultAt(c.errAt); ok {
				in = f.String()
			}
			line := fmt.Sprintf("%s connection %d (%s) at %s: %v (during %s)", []string{"DR", "FULLNAT"}[i], c.id, c.kind,
				r.offset(c.errAt), c.err, in)
			r.lost = append(r.lost, line)
			r.violation("lost " + line)
		}
		fl.mu.Unlock()
	}

	// New connections may fail while a fault moves a VIP or a backend's
	// health is being decided, not outside every fault.
	r.newFails = map[string]int{}
	for vip, p := range s.probers {
		p.mu.Lock()
		for _, at := range p.fails {
			f, ok := r.faultAt(at)
			key := f.kind
			if !ok {
				key = ""
				r.violation(fmt.Sprintf("a new connection to %s failed at %s, outside every fault", vip, r.offset(at)))
			}
			r.newFails[key]++
			if len(r.failTimes) < 40 {
				r.failTimes = append(r.failTimes, vip.String()+"@"+r.offset(at))
			}
		}
		p.mu.Unlock()
	}

	// At most one holder per address, except inside a fault's window and
	// for as long as that fault may leave two: a killed owner's addresses
	// stay until their lifetime runs out, any other fault ends an overlap
	// within a failure timeout.
	s.tl.mu.Lock()
	changes := slices.Clone(s.tl.changes)
	s.tl.mu.Unlock()
	since := map[netip.Addr]time.Time{}
	for _, c := range append(changes, holding{at: r.end}) {
		for vip, from := range since {
			if c.vip != vip && !c.at.Equal(r.end) {
				continue
			}
			d := c.at.Sub(from)
			f, ok := r.faultAt(from)
			allowed, _ := r.overlapAllowed(from)
			line := fmt.Sprintf("%s on two directors for %v from %s", vip, d.Round(time.Millisecond), r.offset(from))
			if ok {
				line += " (during " + f.String() + ")"
			}
			r.overlaps = append(r.overlaps, line)
			if !ok || d > allowed {
				r.violation(line + fmt.Sprintf(", allowed %v", allowed))
			}
			delete(since, vip)
		}
		if len(c.holders) > 1 {
			since[c.vip] = c.at
		}
	}

	// ERROR lines need a fault to explain them.
	for _, l := range s.ds {
		for _, line := range strings.Split(l.log(), "\n") {
			if !strings.Contains(line, "level=ERROR") {
				continue
			}
			at, ok := lineTime(line)
			if ok {
				if _, in := r.faultAt(at); in {
					continue
				}
			}
			r.errorLines = append(r.errorLines, l.host.ID+": "+line)
			r.violation(l.host.ID + ": ERROR outside every fault: " + line)
		}
	}
	r.diagnoses = s.diagnoses
	r.resources = s.res.String()
	for _, v := range s.res.bounds() {
		r.violation(v)
	}
}

func (r *soakReport) offset(at time.Time) string {
	return fmt.Sprintf("%.1fs", at.Sub(r.start).Seconds())
}

// check fails the test for each violation.
func (r *soakReport) check(t *testing.T) {
	for _, v := range r.violations {
		t.Errorf("soak (seed %d): %s", r.seed, v)
	}
}

func (r *soakReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %v (ran %v), %d faults, %d long-lived connections on each of DR and FULLNAT, new connections every 200 ms to each\n",
		r.seed, r.duration, r.end.Sub(r.start).Round(time.Second), len(r.faults), soakConns)
	b.WriteString("not injected: clock steps (the directors share the VM's clock) and ECMP joins and leaves (TestClockStep and TestECMPJoinHasState cover them)\n\n")
	kinds := map[string]int{}
	var settle []time.Duration
	for _, f := range r.faults {
		kinds[f.kind]++
		if !f.settled.IsZero() {
			settle = append(settle, f.settled.Sub(f.end))
		}
	}
	b.WriteString("faults by kind:")
	for _, k := range soakKinds {
		fmt.Fprintf(&b, " %s %d", k.kind, kinds[k.kind])
	}
	slices.Sort(settle)
	if len(settle) > 0 {
		fmt.Fprintf(&b, "\nsettled after undoing a fault: median %v, max %v", settle[len(settle)/2].Round(time.Millisecond),
			settle[len(settle)-1].Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "\n\nestablished connections lost: %d\n", len(r.lost))
	for _, l := range r.lost {
		b.WriteString("  " + l + "\n")
	}
	for _, d := range r.diagnoses {
		b.WriteString("  " + strings.ReplaceAll(strings.TrimSpace(d), "\n", "\n  ") + "\n")
	}
	b.WriteString("new connections failed, by fault:")
	for k, n := range r.newFails {
		if k == "" {
			k = "outside every fault"
		}
		fmt.Fprintf(&b, " %s %d", k, n)
	}
	if len(r.failTimes) > 0 {
		fmt.Fprintf(&b, " (at %s)", strings.Join(r.failTimes, " "))
	}
	fmt.Fprintf(&b, "\naddresses on two directors: %d\n", len(r.overlaps))
	for _, l := range r.overlaps {
		b.WriteString("  " + l + "\n")
	}
	fmt.Fprintf(&b, "ERROR lines outside every fault: %d\n", len(r.errorLines))
	for _, l := range r.errorLines[:min(len(r.errorLines), 20)] {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("\nresources (one sample every 5 s per process):\n" + r.resources)
	b.WriteString("\nfaults:\n")
	for _, f := range r.faults {
		settled := "never settled"
		if !f.settled.IsZero() {
			settled = "settled " + f.settled.Sub(f.end).Round(time.Millisecond).String() + " after"
		}
		fmt.Fprintf(&b, "  %6s %s (%s)\n", r.offset(f.start), f, settled)
	}
	fmt.Fprintf(&b, "\nviolations: %d\n", len(r.violations))
	for _, v := range r.violations {
		b.WriteString("  " + v + "\n")
	}
	return b.String()
}

// soakResources samples each director's process every 5 s: resident
// memory, open descriptors, goroutines, and the conntrack entries of its
// namespace.
type soakResources struct {
	mu      sync.Mutex
	samples map[string][]soakSample // by director
	stop    chan struct{}
	done    chan struct{}
}

type soakSample struct {
	pid                         int
	rssKiB, fds, goroutines, ct int
}

func startSoakResources(t *testing.T, ds []*lvsd, procs *sync.Mutex) *soakResources {
	r := &soakResources{samples: map[string][]soakSample{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			for _, l := range ds {
				procs.Lock()
				smp, ok := sampleProcess(l)
				procs.Unlock()
				if ok {
					r.mu.Lock()
					r.samples[l.host.ID] = append(r.samples[l.host.ID], smp)
					r.mu.Unlock()
				}
			}
			select {
			case <-r.stop:
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *soakResources) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// sampleProcess reads one sample of l's process (false if it is not
// running or went away while read).
func sampleProcess(l *lvsd) (soakSample, bool) {
	if l.cmd == nil || l.cmd.Process == nil {
		return soakSample{}, false
	}
	select {
	case <-l.exited:
		return soakSample{}, false
	default:
	}
	pid := l.cmd.Process.Pid
	s := soakSample{pid: pid}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			s.rssKiB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, false
	}
	s.fds = len(fds)
	s.goroutines = goroutines(l)
	if v, err := l.host.ReadSysctl("net/netfilter/nf_conntrack_count"); err == nil {
		s.ct, _ = strconv.Atoi(strings.TrimSpace(v))
	}
	return s, true
}

// goroutines asks the agent's control socket for its goroutine count (-1
// if it does not answer).
func goroutines(l *lvsd) int {
	socket := "/run/lvsd-e2e/" + l.host.Name + ".sock"
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://lvsd/debug/pprof/goroutine?debug=1")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(io.LimitReader(resp.Body, 4096)).ReadString('\n')
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total")))
	if err != nil {
		return -1
	}
	return n
}

// lives splits a director's samples by process.
func lives(samples []soakSample) [][]soakSample {
	var out [][]soakSample
	for i, s := range samples {
		if i == 0 || s.pid != samples[i-1].pid {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], s)
	}
	return out
}

// bounds says which process grew past its bounds: from its third sample
// (after the start-up) on, resident memory at most 1.5 × + 16 MiB, 64 more
// descriptors, 200 more goroutines; conntrack entries at most 8,000 in a
// director's namespace (the health checks' TIME_WAIT entries and the new
// connections' reach about 3,000). A process needs six samples to be judged.
func (r *soakResources) bounds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, samples := range r.samples {
		for _, life := range lives(samples) {
			for _, s := range life {
				if s.ct > 8000 {
					out = append(out, fmt.Sprintf("%s: %d conntrack entries", id, s.ct))
					break
				}
			}
			if len(life) < 6 {
				continue
			}
			base := life[2]
			for _, s := range life[3:] {
				switch {
				case float64(s.rssKiB) > 1.5*float64(base.rssKiB)+16*1024:
					out = append(out, fmt.Sprintf("%s (pid %d): resident memory %d KiB after %d KiB", id, s.pid, s.rssKiB, base.rssKiB))
				case s.fds > base.fds+64:
					out = append(out, fmt.Sprintf("%s (pid %d): %d descriptors after %d", id, s.pid, s.fds, base.fds))
				case base.goroutines > 0 && s.goroutines > base.goroutines+200:
					out = append(out, fmt.Sprintf("%s (pid %d): %d goroutines after %d", id, s.pid, s.goroutines, base.goroutines))
				default:
					continue
				}
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func (r *soakResources) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.samples))
	for id := range r.samples {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b strings.Builder
	for _, id := range ids {
		for i, life := range lives(r.samples[id]) {
			curve := func(name string, v func(soakSample) int) {
				fmt.Fprintf(&b, "  %s process %d %s:", id, i+1, name)
				for _, s := range life {
					fmt.Fprintf(&b, " %d", v(s))
				}
				b.WriteString("\n")
			}
			curve("RSS MiB", func(s soakSample) int { return s.rssKiB / 1024 })
			curve("fds", func(s soakSample) int { return s.fds })
			curve("goroutines", func(s soakSample) int { return s.goroutines })
			curve("conntrack", func(s soakSample) int { return s.ct })
		}
	}
	return b.String()
}
