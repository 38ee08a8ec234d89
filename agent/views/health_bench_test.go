package views

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
)

// checkedDirector is statusDirector with a tcp check on every backend when
// checked: a real health.Monitor whose checkers pass at once has run one
// round of every target and stopped, so every backend is known healthy
// and no round runs while the benchmark does.
func checkedDirector(tb testing.TB, n, backends int, checked bool) *Views {
	e := newEnv(tb)
	check := ""
	if checked {
		check = "health: {checks: [{type: tcp}]}\n"
	}
	var b strings.Builder
	for i := range n {
		if i%500 == 0 && i > 0 { // files are read up to 1 MiB
			e.service(fmt.Sprintf("bulk%05d", i), b.String())
			b.Reset()
		}
		fmt.Fprintf(&b, "---\nservice: s%05d\nvip: 10.%d.%d.1\nports: [%d]\n%sbackends:\n", i, 1+i/10/250, i/10%250, 1000+i%10, check)
		for j := range backends {
			fmt.Fprintf(&b, "  - {address: 10.200.%d.%d}\n", j/250, j%250+1)
		}
	}
	e.service("bulk", b.String())
	if !checked {
		a := e.agent()
		a.a.Step(context.Background())
		return a
	}
	m := health.NewMonitor(nil, health.WithJitter(func(time.Duration) time.Duration { return 0 }),
		health.WithFactory(func(*health.Target, *health.Check) health.Checker {
			return health.CheckerFunc(func(context.Context) health.Result { return health.Result{OK: true} })
		}))
	a := e.agentWith(agent.Options{Health: m}) // Start hands the targets over
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for deadline := time.Now().Add(5 * time.Minute); ; {
		known := 0
		for _, st := range m.Snapshot() {
			if st.Known {
				known++
			}
		}
		if known == n*backends {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d targets known after five minutes", known, n*backends)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	a.a.Step(context.Background()) // takes the health in
	return a
}

// BenchmarkCheckedStatus is what 100,000 health-checked backends (10,000
// services × 10, a tcp check each) cost the director's answers beside the
// same director without checks: the summary `lvsd status` (api, as the
// socket serves it), `lvsd status --all` (build only: its JSON does not
// depend on checks), a /metrics scrape, and a reload with nothing changed
// (SIGHUP, `lvsd reload`) with the pass that follows.
//
//	nice -n 19 go test -run '^$' -bench CheckedStatus -benchtime 10x ./agent/views
func BenchmarkCheckedStatus(b *testing.B) {
	const n = 10000
	for _, checked := range []bool{false, true} {
		a := checkedDirector(b, n, 10, checked)
		b.Run(fmt.Sprintf("checks=%v/status=summary", checked), func(b *testing.B) {
			b.ReportAllocs()
			h := a.APIHandler()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", RouteStatus+"?view="+string(ViewSummary), nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
		b.Run(fmt.Sprintf("checks=%v/status=all", checked), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Status(context.Background(), StatusQuery{View: ViewFull}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("checks=%v/metrics", checked), func(b *testing.B) {
			b.ReportAllocs()
			benchScrape(b, a)
		})
		b.Run(fmt.Sprintf("checks=%v/reload", checked), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a.a.Reload()
				a.a.Step(context.Background())
			}
		})
	}
}
