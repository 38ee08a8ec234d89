package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// gate is a Checker that blocks until released and tracks how many of its
// kind run at once.
type gate struct {
	release         chan struct{}
	running, topped atomic.Int32
}

func (g *gate) Check(ctx context.Context) Result {
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		top := g.topped.Load()
		if n <= top || g.topped.CompareAndSwap(top, n) {
			break
		}
	}
	select {
	case <-g.release:
		return pass
	case <-ctx.Done():
		return fail
	}
}

// Checks beyond the bound wait for a slot, in order, and pass once they
// run: delayed, not failed. The bound holds whatever the number of
// targets and of checks per target; one target with more checks than the
// bound takes every slot and runs alone.
func TestMonitorMaxInFlight(t *testing.T) {
	tests := []struct {
		name                   string
		targets, checks, bound int
		running                int // checks running while the gate is shut
	}{
		{"one check each", 10, 1, 3, 3},
		{"two checks each", 6, 2, 4, 4},
		{"more checks than slots", 3, 3, 2, 3},
		{"bound above the demand", 4, 1, 16, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &gate{release: make(chan struct{})}
			clock := newFakeClock()
			logger, logs := newTestLogger()
			m := NewMonitor(logger, WithClock(clock), WithMaxInFlight(tt.bound),
				WithJitter(func(time.Duration) time.Duration { return 0 }),
				WithFactory(func(*Target, *Check) Checker { return g }))
			var ts []Target
			for i := range tt.targets {
				tg := target(fmt.Sprint("t", i), 1, 1)
				for range tt.checks - 1 {
					tg.Checks = append(tg.Checks, tg.Checks[0])
				}
				ts = append(ts, tg)
			}
			m.Set(ts)
			runMonitor(t, m)
			waitFor(t, "the checks to fill the slots", func() bool { return int(g.running.Load()) == tt.running })
			time.Sleep(20 * time.Millisecond) // room for a check beyond the bound to start, if one could
			st := m.Stats()
			if int(g.running.Load()) != tt.running || st.InFlight > tt.bound || st.MaxInFlight != tt.bound {
				t.Fatalf("%d checks running, stats %+v; want %d running, at most %d in flight", g.running.Load(), st, tt.running, tt.bound)
			}
			delayed := tt.targets*tt.checks > tt.bound
			if (st.Delayed > 0) != delayed || (len(logs.lines("event=health_delayed", fmt.Sprintf("max_in_flight=%d", tt.bound))) == 1) != delayed {
				t.Errorf("delayed %d, logged:\n%s\nwant delays logged once: %v", st.Delayed, logs, delayed)
			}
			close(g.release)
			awaitRounds(t, m, tt.targets)
			for key, st := range m.Snapshot() {
				if !st.Known || !st.Healthy || st.FailedRounds != 0 {
					t.Errorf("%s: %+v, want its delayed round passed", key, st)
				}
			}
			if top := int(g.topped.Load()); top > max(tt.bound, tt.checks) {
				t.Errorf("%d checks ran at once, bound %d", top, tt.bound)
			}
			if len(logs.lines("event=health_delayed")) > 1 {
				t.Errorf("delays logged more than once a minute:\n%s", logs)
			}
		})
	}
}

// The default bound stays within a quarter of the file descriptor limit.
func TestDefaultMaxInFlight(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	got := NewMonitor(nil).Stats().MaxInFlight
	if got < 1 || got > DefaultMaxInFlight || uint64(got) > max(1, lim.Cur/4) {
		t.Errorf("default bound %d with RLIMIT_NOFILE %d", got, lim.Cur)
	}
	if got := NewMonitor(nil, WithMaxInFlight(0)).Stats().MaxInFlight; got < 1 {
		t.Errorf("WithMaxInFlight(0): bound %d, want the default", got)
	}
}

// A round whose check could not run on this host (out of file
// descriptors) is not counted: the target keeps its state, and the
// cause is logged once a minute, not once a round.
func TestMonitorLocalFailureNotCounted(t *testing.T) {
	emfile := Result{Reason: "connect: too many open files", Local: true}
	tests := []struct {
		name       string
		results    []Result
		wantKnown  bool
		wantHealth bool
		notCounted uint64
	}{
		{"out of descriptors: nothing learnt", []Result{emfile, emfile, emfile}, false, true, 3},
		{"between passing rounds", []Result{pass, emfile, pass}, true, true, 1},
		{"a real failure counts", []Result{fail, fail, fail}, true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.script("a", tt.results...)
			h.m.Set([]Target{target("a", 1, 1)})
			h.start(1)
			for range len(tt.results) - 1 {
				h.round(1)
			}
			st := h.state("a")
			counted := uint64(len(tt.results)) - tt.notCounted
			if st.Known != tt.wantKnown || st.Healthy != tt.wantHealth || st.Rounds != counted {
				t.Errorf("%+v: want known %v, healthy %v, %d rounds", st, tt.wantKnown, tt.wantHealth, counted)
			}
			if got := h.m.Stats().NotCounted; got != tt.notCounted {
				t.Errorf("%d rounds not counted, want %d", got, tt.notCounted)
			}
			if n := len(h.log.lines("event=health_local", "target=a")); n != min(1, int(tt.notCounted)) {
				t.Errorf("%d health_local lines, want at most one:\n%s", n, h.log)
			}
		})
	}
}

// errDialer fails every dial with err.
type errDialer struct{ err error }

func (d errDialer) DialContext(context.Context, string, string) (net.Conn, error) { return nil, d.err }

func TestDialFailedLocal(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", err)}
	}
	tests := []struct {
		err   error
		local bool
	}{
		{opErr(syscall.EMFILE), true},
		{opErr(syscall.ENFILE), true},
		{opErr(syscall.ENOBUFS), true},
		{opErr(syscall.ECONNREFUSED), false},
		{opErr(syscall.EHOSTUNREACH), false},
		{context.DeadlineExceeded, false},
		{errors.New("something else"), false},
	}
	for _, tt := range tests {
		for _, typ := range []string{"tcp", "http", "udp", "dns"} {
			m := NewMonitor(nil, WithDialer(errDialer{tt.err}))
			tg := Target{Key: "a", Addr: netip.MustParseAddr("192.0.2.1"), Port: 80}
			c := Check{Type: typ, Interval: time.Second, Timeout: time.Second, Query: "example.org"}
			res := m.newChecker(&tg, &c).Check(context.Background())
			if res.OK || res.Local != tt.local {
				t.Errorf("%s check, dial error %v: %+v, want failed with Local %v", typ, tt.err, res, tt.local)
			}
		}
	}
}

// closer is a Checker that counts its Close calls; it blocks its check
// until released when block is set.
type closer struct {
	block  chan struct{}
	closes atomic.Int32
}

func (c *closer) Check(ctx context.Context) Result {
	if c.block != nil {
		select {
		case <-c.block:
		case <-ctx.Done():
		}
	}
	return pass
}

func (c *closer) Close() error { c.closes.Add(1); return nil }

// A target's checkers are closed exactly once when it goes: at once when
// it was between rounds, after its round when one ran, at the end of Run
// for those still there.
func TestMonitorClosesCheckers(t *testing.T) {
	tests := []struct {
		name    string
		blocked bool // its check blocks: the target goes during its round
		stopRun bool // the Monitor stops instead
	}{
		{"removed between rounds", false, false},
		{"removed during a round", true, false},
		{"the Monitor stops", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &closer{}
			if tt.blocked {
				c.block = make(chan struct{})
				defer close(c.block)
			}
			m := NewMonitor(nil, WithClock(newFakeClock()), WithJitter(func(time.Duration) time.Duration { return 0 }),
				WithFactory(func(*Target, *Check) Checker { return c }))
			m.Set([]Target{target("a", 1, 1)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			if tt.blocked {
				waitFor(t, "the round to start", func() bool { return m.Stats().InFlight == 1 })
			} else {
				awaitRounds(t, m, 1)
			}
			if c.closes.Load() != 0 {
				t.Fatal("closed while the target is still checked")
			}
			if tt.stopRun {
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else {
				m.Set(nil)
			}
			waitFor(t, "the checker closed", func() bool { return c.closes.Load() == 1 })
			cancel()
			time.Sleep(10 * time.Millisecond)
			if n := c.closes.Load(); n != 1 {
				t.Errorf("closed %d times, want once", n)
			}
		})
	}
}
