package health

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestMonitorEndToEnd runs the real clock, jitter and HTTP checker against
// a backend that goes down and comes back, as the agent will.
func TestMonitorEndToEnd(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv := newHTTP(t, "127.0.0.1", false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(WeightHeader, "250")
		w.WriteHeader(int(status.Load()))
	}))
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	logger, logs := newTestLogger()
	m := NewMonitor(logger)
	key := "web/" + ap.String()
	m.Set([]Target{{
		Key: key, Addr: ap.Addr(), Port: ap.Port(), Rise: 2, Fall: 2,
		// A timeout far above a local answer's time: on a loaded host a tight one
		// fails a first round and logs transitions the test does not expect.
		Checks: []Check{{Type: "http", Path: "/healthz", Interval: 20 * time.Millisecond, Timeout: time.Second, WeightHeader: true}},
	}})
	runMonitor(t, m)
	awaitState := func(what string, cond func(State) bool) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			if cond(m.Snapshot()[key]) {
				return
			}
			select {
			case <-m.Changed():
			case <-time.After(50 * time.Millisecond): // hints coalesce; poll as well
			case <-deadline:
				t.Fatalf("timed out waiting for %s; state %+v\n%s", what, m.Snapshot()[key], logs)
			}
		}
	}
	awaitState("known healthy with weight 250", func(s State) bool { return s.Known && s.Healthy && s.Weight == 250 })
	status.Store(503)
	awaitState("unhealthy", func(s State) bool { return !s.Healthy })
	if st := m.Snapshot()[key]; st.Fails < 2 || st.LastError != "http :"+strconv.Itoa(int(ap.Port()))+": status 503, want 200-399" {
		t.Errorf("unhealthy after %d failures (fall 2), error %q", st.Fails, st.LastError)
	}
	status.Store(200)
	awaitState("healthy again", func(s State) bool { return s.Healthy })
	if st := m.Snapshot()[key]; st.Passes < 2 {
		t.Errorf("healthy after %d passes (rise 2)", st.Passes)
	}
	if n := len(logs.lines("event=health", "target="+key, "level=INFO")); n != 2 {
		t.Errorf("%d transition lines, want 2:\n%s", n, logs)
	}
}

// TestMonitorStopsPromptly: Run returns soon after cancellation even while
// checks with long timeouts are waiting on silent backends.
func TestMonitorStopsPromptly(t *testing.T) {
	ap := netip.MustParseAddrPort(silentTCP(t, "127.0.0.1"))
	m := NewMonitor(nil, WithJitter(func(time.Duration) time.Duration { return 0 }))
	var ts []Target
	for _, typ := range []string{"http", "https", "tcp"} {
		ts = append(ts, Target{Key: typ, Addr: ap.Addr(), Port: ap.Port(), Rise: 1, Fall: 1,
			Checks: []Check{{Type: typ, Interval: 30 * time.Second, Timeout: 30 * time.Second, InsecureTLS: true}}})
	}
	m.Set(ts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case <-done: // the 30 s checks in flight were cancelled, not waited for
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop")
	}
	// The aborted rounds published nothing (only tcp, whose connect to the
	// silent listener succeeds, finished a round).
	for k, st := range m.Snapshot() {
		if k != "tcp" && st.Known {
			t.Errorf("%s: aborted round published: %+v", k, st)
		}
	}
}
