package realserver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/lvsd/lvsd/agent/config"
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

// HealthHandler answers the directors' probes on the configured path:
//   - 200 with WeightHeader set to the configured weight, or to 0 while
//     drained (healthy but taking no new connections);
//   - 503 with WeightHeader 0 when a local check fails, a configured VIP
//     is not on lo or the tunnel VIPs' decapsulation is not in place (a
//     device down, a GUE port closed): traffic would be dropped. The header is 0 rather
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
		var problems []string
		for _, v := range st.MissingVIPs {
			problems = append(problems, fmt.Sprintf("VIP %s is not on %s", v, Loopback))
		}
		for _, what := range st.DownTunnels {
			problems = append(problems, "tunnel decapsulation: "+what)
		}
		for _, res := range a.runChecks(r.Context(), st.checks) {
			if !res.OK {
				problems = append(problems, fmt.Sprintf("check %s failed: %s", res.Check, res.Error))
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(problems) > 0 {
			w.Header().Set(WeightHeader, "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %s\n", strings.Join(problems, "; "))
			return
		}
		w.Header().Set(WeightHeader, strconv.Itoa(st.Weight))
		state := "ok"
		if st.Drained {
			state = "drained"
		}
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
