package sdnotify

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a service manager that records what it was told.
type recorder struct {
	mu       sync.Mutex
	sent     []string
	listens  bool
	watchdog time.Duration
}

func (r *recorder) Notify(state string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, strings.Split(strings.TrimSpace(state), "\n")...)
	return r.listens, nil
}

func (r *recorder) Watchdog() time.Duration { return r.watchdog }

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

// READY=1 is sent once, when the check says ready; the watchdog is fed only
// while the check reports no error; STOPPING=1 at the end.
func TestRun(t *testing.T) {
	r := &recorder{listens: true, watchdog: 30 * time.Millisecond}
	var mu sync.Mutex
	calls := 0
	check := func(time.Time) (bool, string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case calls < 3:
			return false, "starting up", nil
		case calls < 6:
			return true, "fine", nil
		}
		return true, "", errors.New("wedged")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), r, check); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n >= 8 || time.Now().After(deadline) {
			break
		}
	}
	cancel()
	<-done
	got := r.lines()
	count := func(s string) int {
		return len(slices.DeleteFunc(slices.Clone(got), func(l string) bool { return l != s }))
	}
	if count("READY=1") != 1 || count("WATCHDOG=1") != 3 || got[len(got)-1] != "STOPPING=1" {
		t.Errorf("sent %q: want READY=1 once, WATCHDOG=1 for the 3 healthy checks, STOPPING=1 last", got)
	}
	if !slices.Contains(got, "STATUS=starting up") || !slices.Contains(got, "STATUS=fine") {
		t.Errorf("sent %q: want the statuses", got)
	}
}

// Without a service manager it returns at once.
func TestRunWithoutServiceManager(t *testing.T) {
	r := &recorder{}
	Run(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), r, func(time.Time) (bool, string, error) {
		t.Error("checked without a service manager")
		return false, "", nil
	})
	if got := r.lines(); !slices.Equal(got, []string{"STATUS=starting"}) {
		t.Errorf("sent %q", got)
	}
}
