package health

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an HTTP server that counts the connections it accepts
// and those still open.
type countingServer struct {
	addr           string
	accepted, open atomic.Int32
	srv            *http.Server
}

func newCountingServer(t *testing.T, h http.Handler, idle ...time.Duration) *countingServer {
	cs := &countingServer{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs.addr = l.Addr().String()
	cs.srv = &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			cs.accepted.Add(1)
			cs.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			cs.open.Add(-1)
		}
	}}
	if len(idle) > 0 {
		cs.srv.IdleTimeout = idle[0]
	}
	go cs.srv.Serve(l)
	t.Cleanup(func() { cs.srv.Close() })
	return cs
}

// checker builds the http checker of the default Factory for addr.
func httpCheckerFor(t *testing.T, addr string, c Check, opts ...Option) *httpChecker {
	c.Type = "http"
	ap := netip.MustParseAddrPort(addr)
	tg := Target{Key: "k", Addr: ap.Addr(), Port: ap.Port(), Checks: []Check{c}}
	ch, ok := NewMonitor(nil, opts...).newChecker(&tg, &tg.Checks[0]).(*httpChecker)
	if !ok {
		t.Fatal("not an http checker")
	}
	t.Cleanup(func() { ch.Close() })
	return ch
}

func runChecks(t *testing.T, ch Checker, n int) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res := ch.Check(ctx)
		cancel()
		if !res.OK {
			t.Fatalf("check %d: %s", i, res.Reason)
		}
	}
}

func TestHTTPReuse(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	tests := []struct {
		name  string
		reuse int
		want  int32
	}{
		{"default: a new connection every 10 rounds", 0, 3},
		{"reuse 1: a new connection every round", 1, 25},
		{"reuse 5", 5, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := newCountingServer(t, ok)
			var opts []Option
			if tt.reuse > 0 {
				opts = append(opts, WithReuse(tt.reuse))
			}
			ch := httpCheckerFor(t, cs.addr, Check{}, opts...)
			runChecks(t, ch, 25)
			if got := cs.accepted.Load(); got != tt.want {
				t.Errorf("%d connections for 25 rounds, want %d", got, tt.want)
			}
			ch.Close()
			waitFor(t, "the server to see every connection closed", func() bool { return cs.open.Load() == 0 })
		})
	}
}

func TestHTTPReuseNotAfter(t *testing.T) {
	tests := []struct {
		name string
		h    http.HandlerFunc
	}{
		{"Connection: close from the backend", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
		}},
		{"a failing status", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}},
		{"a body beyond the cap", func(w http.ResponseWriter, r *http.Request) {
			w.Write(make([]byte, maxBodyBytes+10))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := newCountingServer(t, tt.h)
			ch := httpCheckerFor(t, cs.addr, Check{})
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ch.Check(ctx)
				cancel()
			}
			if got := cs.accepted.Load(); got != 3 {
				t.Errorf("%d connections for 3 rounds, want 3 (none kept)", got)
			}
		})
	}
}

func TestHTTPReuseStaleConnection(t *testing.T) {
	// The backend closes idle connections after 20 ms; a round later the
	// kept connection is dead. The check notices, dials again and passes.
	cs := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), 20*time.Millisecond)
	ch := httpCheckerFor(t, cs.addr, Check{})
	for range 3 {
		runChecks(t, ch, 1)
		time.Sleep(100 * time.Millisecond)
	}
	if got := cs.accepted.Load(); got != 3 {
		t.Errorf("%d connections, want 3", got)
	}
}

func TestHTTPReuseBackendGone(t *testing.T) {
	// After the backend stops, the kept connection is dead and the new
	// dial is refused: the check fails with the refusal.
	cs := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	ch := httpCheckerFor(t, cs.addr, Check{})
	runChecks(t, ch, 1)
	cs.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	wantResult(t, ch.Check(ctx), false, "connect: connection refused")
}

func TestMonitorClosesConnectionsOfRemovedTargets(t *testing.T) {
	cs := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	ap := netip.MustParseAddrPort(cs.addr)
	m := NewMonitor(nil, WithJitter(func(time.Duration) time.Duration { return 0 }))
	m.Set([]Target{{Key: "a", Addr: ap.Addr(), Port: ap.Port(), Rise: 1, Fall: 1,
		Checks: []Check{{Type: "http", Interval: time.Hour, Timeout: time.Second}}}})
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	wg.Add(1)
	go func() { defer wg.Done(); m.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	waitFor(t, "the first round", func() bool { return m.Snapshot()["a"].Known })
	if cs.open.Load() != 1 {
		t.Fatalf("%d connections open after the first round, want the kept one", cs.open.Load())
	}
	m.Set(nil)
	waitFor(t, "the kept connection to close", func() bool { return cs.open.Load() == 0 })
}
