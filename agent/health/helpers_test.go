package health

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when told.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	afters int
	delays []time.Duration // every After argument, in order
	waits  []fakeWait
}

type fakeWait struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.afters++
	c.delays = append(c.delays, d)
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
	} else {
		c.waits = append(c.waits, fakeWait{c.now.Add(d), ch})
	}
	return ch
}

// Advance moves the clock and fires the waits that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.waits[:0]
	for _, w := range c.waits {
		if w.at.After(c.now) {
			keep = append(keep, w)
		} else {
			w.ch <- c.now
		}
	}
	c.waits = keep
}

// awaitRounds waits until m has finished n rounds in all and is idle: no
// round runs and its scheduler sleeps until the first round queued (or,
// with none, until woken), so that a clock advanced now wakes it.
func awaitRounds(t *testing.T, m *Monitor, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		planned := len(m.queue) == 0 && m.sleepUntil.IsZero() ||
			len(m.queue) > 0 && !m.sleepUntil.IsZero() && !m.sleepUntil.After(m.at(m.queue[0].at))
		got, idle := m.finished, m.sleeping && planned && len(m.slots) == 0 && len(m.wake) == 0
		m.mu.Unlock()
		if got >= uint64(n) && idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d rounds, have %d (idle %v)", n, got, idle)
		}
		time.Sleep(time.Millisecond)
	}
}

// script is a Checker that returns its results in turn, then the last one
// forever, and counts its calls.
type script struct {
	mu      sync.Mutex
	results []Result
	calls   atomic.Int32
}

func (s *script) Check(context.Context) Result {
	n := int(s.calls.Add(1)) - 1
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.results[min(n, len(s.results)-1)]
}

// then replaces what the following calls return.
func (s *script) then(rs ...Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results = append(s.results[:0:0], rs...)
	s.calls.Store(0)
}

var (
	pass = Result{OK: true}
	fail = Result{Reason: "boom"}
)

// seq turns "+-+" into results: + passes, - fails.
func seq(s string) []Result {
	var rs []Result
	for _, c := range s {
		if c == '+' {
			rs = append(rs, pass)
		} else {
			rs = append(rs, fail)
		}
	}
	return rs
}

// logBuf collects log output safely across goroutines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the log lines containing all of the substrings.
func (l *logBuf) lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func newTestLogger() (*slog.Logger, *logBuf) {
	buf := &logBuf{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// runMonitor starts m.Run and stops it at the end of the test.
func runMonitor(t *testing.T, m *Monitor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// drain empties a hint channel and reports whether it held a hint.
func drain(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
