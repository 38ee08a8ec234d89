package realserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
)

// WeightHeader carries the weight a real server asks for (seed 000's
// weighted load balancing, 0 to 1000).
const WeightHeader = "X-Load-Balancing-Endpoint-Weight"

// CheckResult is the outcome of one local check.
type CheckResult struct {
	Check string `json:"check"` // "tcp 127.0.0.1:80"
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Limits of the weight endpoint, which any host that reaches its port may
// call: a client that is slow or holds many connections cannot tie up the
// agent.
const (
	endpointMaxConns   = 64
	endpointTimeout    = 5 * time.Second
	endpointIdle       = 30 * time.Second
	endpointMaxHeaders = 8 << 10
)

// serveEndpoint answers h on the weight endpoint's listener l until ctx ends.
func serveEndpoint(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: endpointTimeout, ReadTimeout: endpointTimeout,
		WriteTimeout: endpointTimeout, IdleTimeout: endpointIdle, MaxHeaderBytes: endpointMaxHeaders,
		ErrorLog: log.New(io.Discard, "", 0)} // a client's broken request is not the agent's error
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(netutil.LimitListener(l, endpointMaxConns)); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// HealthHandler answers the directors' probes on the configured path:
//   - 200 with WeightHeader set to the configured weight, or to 0 while
//     drained (healthy but taking no new connections);
//   - 503 with WeightHeader 0 when a local check fails, a configured VIP
//     is not on lo or the tunnel VIPs' decapsulation is not in place (a
//     device down, a GUE port closed): traffic would be dropped; or when
//     realserver.client_address is set and its TOA programs could not be
//     set up: every connection would reach the applications with a
//     director's address instead of the client's. The header is 0 rather
//     than absent so that a consumer reading only the header stops too.
//
// The checks run on every request, so the answer is never stale.
func (a *Agent) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := a.status.Load()
		if r.URL.Path != st.HealthPath {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		// The answer goes to whoever can reach the port: it says what is
		// wrong, not how (addresses, error texts); `lvsd status` on this
		// server has the details.
		var problems []string
		if n := len(st.MissingVIPs); n > 0 {
			problems = append(problems, fmt.Sprintf("%d VIP(s) not on %s", n, planner.Loopback))
		}
		if n := len(st.DownTunnels); n > 0 {
			problems = append(problems, fmt.Sprintf("%d tunnel(s) not decapsulating", n))
		}
		if st.toaFailed() {
			problems = append(problems, toaProblem)
		}
		failed := 0
		for _, res := range a.runChecks(r.Context(), st.checks) {
			if !res.OK {
				failed++
			}
		}
		if failed > 0 {
			problems = append(problems, fmt.Sprintf("%d of %d local checks failed", failed, len(st.checks)))
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		now := a.opts.Now()
		if len(problems) > 0 {
			a.probes.count(now, &a.probes.unhealthy)
			w.Header().Set(WeightHeader, "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %s (lvsd status on this server says why)\n", strings.Join(problems, "; "))
			return
		}
		w.Header().Set(WeightHeader, strconv.Itoa(st.Weight))
		state, counter := "ok", &a.probes.ok
		if st.Drained {
			state, counter = "drained", &a.probes.drained
		}
		a.probes.count(now, counter)
		fmt.Fprintf(w, "%s weight=%d\n", state, st.Weight)
	})
}

// runChecks runs the checks in parallel, each bounded by its timeout.
func (a *Agent) runChecks(ctx context.Context, checks []config.LocalCheck) []CheckResult {
	out := make([]CheckResult, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = CheckResult{Check: c.String(), OK: true}
			cctx, cancel := context.WithTimeout(ctx, c.Timeout)
			defer cancel()
			conn, err := a.opts.Dial(cctx, "tcp", c.Address)
			if err != nil {
				out[i].OK, out[i].Error = false, err.Error()
				return
			}
			conn.Close()
		}()
	}
	wg.Wait()
	return out
}
