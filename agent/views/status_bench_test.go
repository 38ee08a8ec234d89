package views

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// statusDirector is a director of n services × backends backends, ten
// services to a VIP, reconciled once against the fakes.
func statusDirector(tb testing.TB, n, backends int) *Views {
	e := newEnv(tb)
	var b strings.Builder
	for i := range n {
		if i%500 == 0 && i > 0 { // files are read up to 1 MiB
			e.service(fmt.Sprintf("bulk%05d", i), b.String())
			b.Reset()
		}
		fmt.Fprintf(&b, "---\nservice: s%05d\nvip: 10.%d.%d.1\nports: [%d]\nbackends:\n", i, 1+i/10/250, i/10%250, 1000+i%10)
		for j := range backends {
			fmt.Fprintf(&b, "  - {address: 10.200.%d.%d}\n", j/250, j%250+1)
		}
	}
	e.service("bulk", b.String())

	a := e.agent()
	a.a.Step(context.Background())
	return a
}

// BenchmarkStatus times the director's side of `lvsd status` with the
// fakes: building the Status from the last pass's snapshot, and the whole
// API answer (Status and its JSON) as the socket serves it, for the full
// view (--all, --json) and the summary `lvsd status` asks for at scale.
func BenchmarkStatus(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		a := statusDirector(b, n, 10)
		for _, view := range []View{ViewFull, ViewSummary} {
			b.Run(fmt.Sprintf("services=%d/view=%s/build", n, view), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := a.Status(context.Background(), StatusQuery{View: view}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("services=%d/view=%s/api", n, view), func(b *testing.B) {
				b.ReportAllocs()
				h := a.APIHandler()
				var size int
				for b.Loop() {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", RouteStatus+"?view="+string(view), nil))
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
					size = rec.Body.Len()
				}
				b.ReportMetric(float64(size), "answer-bytes")
			})
		}
	}
}

// BenchmarkMetrics times a /metrics scrape (collect, gather, render as
// text) of a director of 1,000 and 10,000 services × 10 backends, with the
// series per backend and without (metrics.per_backend: false).
func BenchmarkMetrics(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		a := statusDirector(b, n, 10)
		for _, perBackend := range []bool{true, false} {
			b.Run(fmt.Sprintf("services=%d/per_backend=%v", n, perBackend), func(b *testing.B) {
				b.ReportAllocs()
				// The collector reads the mode from the configuration in force;
				// the benchmark runs alone, so it may set it in place.
				a.a.Published().Config.Agent.MetricsPerBackend = perBackend
				benchScrape(b, a)
			})
		}
	}
}

// benchScrape times scrapes of a's metrics, rendered as text, and
// reports the series of the last.
func benchScrape(b *testing.B, a *Views) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(a, "dev"))
	var series int
	for b.Loop() {
		families, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		series = 0
		for _, f := range families {
			series += len(f.GetMetric())
			if _, err := expfmt.MetricFamilyToText(io.Discard, f); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(series), "series")
}
