//go:build e2e && soak

package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
)

// soakFault is one fault of the schedule and, once run, what came of it.
type soakFault struct {
	at     time.Duration // scheduled start, from the beginning of the run
	kind   string
	target int           // a director (1-based), a real server (1-based), or a service (0 DR, 1 FULLNAT)
	arg    int           // the backend and weight of a weight edit
	hold   time.Duration // how long the fault lasts before it is undone

	start, end time.Time // injected, undone
	settled    time.Time // the cluster settled after it (zero: it did not)
}

func (f soakFault) String() string {
	switch f.kind {
	case "weight":
		return fmt.Sprintf("weight: service %s, rs%d weight %d", []string{"dr", "fullnat"}[f.target], f.arg/10+1, f.arg%10)
	case "upgrade":
		return fmt.Sprintf("upgrade: director%d down to the previous release for %v and back", f.target, f.hold)
	case "extra", "restart":
		if f.kind == "extra" {
			return "extra: add or remove the extra service"
		}
		return fmt.Sprintf("restart: director%d stopped and started (planned restart)", f.target)
	case "health":
		return fmt.Sprintf("health: rs%d fails its checks for %v", f.target, f.hold)
	case "stall":
		return fmt.Sprintf("stall: a director was not scheduled for %v", f.end.Sub(f.start).Round(time.Millisecond))
	default:
		return fmt.Sprintf("%s: director%d for %v", f.kind, f.target, f.hold)
	}
}

// soakKinds are the faults and their relative frequency. Not injected, and
// said so in the report: a clock step (the directors share the VM's one
// kernel clock) and ECMP joins and leaves (this soak runs active-standby);
// TestClockStep and TestECMPJoinHasState cover them.
var soakKinds = []struct {
	kind   string
	weight int
}{
	{"weight", 3}, {"extra", 1}, {"invalid", 1}, {"health", 2},
	{"kill", 2}, {"restart", 1}, {"linkcut", 2}, {"partition", 1},
	{"upgrade", 1},
}

// soakSchedule draws the faults of a run from seed: the same seed and
// duration give the same faults in the same order.
func soakSchedule(seed uint64, duration time.Duration) []soakFault {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, k := range soakKinds {
		total += k.weight
	}
	var out []soakFault
	at := 10 * time.Second // the connections run alone first
	for at < duration-15*time.Second {
		n := rng.IntN(total)
		var kind string
		for _, k := range soakKinds {
			if n < k.weight {
				kind = k.kind
				break
			}
			n -= k.weight
		}
		f := soakFault{at: at, kind: kind}
		switch kind {
		case "weight":
			f.target, f.arg = rng.IntN(2), 10*rng.IntN(2)+1+rng.IntN(4)
		case "health":
			f.target, f.hold = 1+rng.IntN(2), time.Duration(2+rng.IntN(4))*time.Second
		case "invalid":
			f.target, f.hold = 1+rng.IntN(3), 3*time.Second
		case "kill", "linkcut", "partition":
			f.target, f.hold = 1+rng.IntN(3), time.Duration(2+rng.IntN(5))*time.Second
		case "restart":
			f.target = 1 + rng.IntN(3)
		case "upgrade":
			f.target, f.hold = 1+rng.IntN(3), time.Duration(10+rng.IntN(11))*time.Second
		}
		out = append(out, f)
		at += f.hold + time.Duration(6+rng.IntN(7))*time.Second
	}
	return out
}

// inject makes the fault happen and undoes it after its hold.
func (s *soak) inject(f *soakFault) {
	t := s.t
	switch f.kind {
	case "weight":
		s.weights[f.target][f.arg/10] = f.arg % 10
		for _, l := range s.ds {
			s.writeServices(l)
		}
	case "extra":
		s.extra = !s.extra
		for _, l := range s.ds {
			s.writeServices(l)
		}
	case "invalid":
		l := s.ds[f.target-1]
		path := filepath.Join(l.dir, "services.d", "zz-invalid.yaml")
		off := l.logSize()
		writeAtomic(t, path, "service: invalid\nvip: 10.0.0.300\nports: [80]\nbackends: [{address: 10.0.0.1}]\n")
		l.waitLog(off, 15*time.Second, "configuration rejected")
		time.Sleep(f.hold)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	case "health":
		rs := s.tp.RS(f.target)
		if err := s.echo[rs.ID].Stop(echo.TCP, soakHealth); err != nil {
			t.Fatal(err)
		}
		time.Sleep(f.hold)
		if err := s.echo[rs.ID].Start(echo.TCP, soakHealth); err != nil {
			t.Fatal(err)
		}
	case "kill":
		l := s.ds[f.target-1]
		s.procs.Lock()
		l.kill()
		s.procs.Unlock()
		time.Sleep(f.hold)
		s.procs.Lock()
		l.start()
		s.procs.Unlock()
	case "restart":
		l := s.ds[f.target-1]
		s.procs.Lock()
		l.stop()
		l.start()
		s.procs.Unlock()
	case "upgrade":
		// As an operator rolls a release back and forward again: a
		// planned stop, the previous release's binary over the same
		// state, running beside this build, then this build again.
		l := s.ds[f.target-1]
		for _, bin := range []string{prevBin, ""} {
			s.procs.Lock()
			off := l.logSize()
			l.stop()
			l.bin = bin
			l.start()
			s.procs.Unlock()
			l.waitLog(off, 30*time.Second, "start-up hold over")
			if bin != "" {
				time.Sleep(f.hold)
			}
		}
	case "linkcut":
		d := s.tp.Director(f.target)
		if err := d.SetPort(false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(f.hold)
		if err := d.SetPort(true); err != nil {
			t.Fatal(err)
		}
	case "partition":
		d := s.tp.Director(f.target)
		partition(t, s.tp, d)
		time.Sleep(f.hold)
		heal(t, d)
	default:
		t.Fatalf("unknown fault %q", f.kind)
	}
}

// kill ends the process with SIGKILL, as a crash would.
func (l *lvsd) kill() {
	if l.cmd == nil {
		return
	}
	_ = l.cmd.Process.Signal(syscall.SIGKILL)
	<-l.exited
}

// settle waits until the cluster is back where its configuration puts it
// and checks it there: every VIP and moving address on director1 alone
// (highest priority, preempt), the same IPVS tables on every director, and
// `lvsd plan` finding nothing to change on any. It returns when that held
// (zero if it never did: an error of the run).
func (s *soak) settle(f *soakFault, rep *soakReport) time.Time {
	const timeout = 60 * time.Second
	deadline := time.Now().Add(timeout)
	owner := s.tp.Director(1).ID
	addrs := append([]netip.Addr{soakVIPDR, soakVIPFullNAT}, soakSNAT...)
	var why string
	for time.Now().Before(deadline) {
		why = s.unsettled(owner, addrs)
		if why == "" {
			return time.Now()
		}
		time.Sleep(500 * time.Millisecond)
	}
	rep.violation(fmt.Sprintf("after %q the cluster did not settle within %v: %s", f.String(), timeout, why))
	s.t.Errorf("after %q the cluster did not settle within %v: %s", f.String(), timeout, why)
	return time.Time{}
}

// unsettled says what still differs from a settled cluster ("" if nothing).
func (s *soak) unsettled(owner string, addrs []netip.Addr) string {
	for _, l := range s.ds {
		select {
		case <-l.exited:
			return l.host.ID + "'s lvsd is not running"
		default:
		}
	}
	for _, a := range addrs {
		if h := holders(s.t, s.tp, a); !slices.Equal(h, []string{owner}) {
			return fmt.Sprintf("%s on %v, want %s", a, h, owner)
		}
	}
	want := mhTable(s.t, s.tp.Director(1))
	// The VIPs' services; the kernel also has the connection-sync relay's
	// own service on 127.0.0.1.
	if n := strings.Count(want, "tcp:"+soakVIPDR.String()+":") + strings.Count(want, "tcp:"+soakVIPFullNAT.String()+":"); n != s.ipvsServices() {
		return fmt.Sprintf("director1 has %d IPVS services, want %d:\n%s", n, s.ipvsServices(), want)
	}
	for _, d := range s.tp.Directors()[1:] {
		if got := mhTable(s.t, d); got != want {
			return fmt.Sprintf("IPVS tables differ:\ndirector1:\n%s\n%s:\n%s", want, d.ID, got)
		}
	}
	for _, l := range s.ds {
		out, code := runLVSD(s.t, l.host, "plan", "--config", l.config())
		if code != 0 || !strings.Contains(out, "no changes") {
			return fmt.Sprintf("%s: lvsd plan (exit %d): %s", l.host.ID, code, strings.TrimSpace(out))
		}
	}
	return ""
}
