package main

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/lvsd/lvsd/agent/views"
)

// scaleStatus is a director's full status of n services × backends, as the
// agent answers it (compact JSON), with a problem every hundredth service.
func scaleStatus(tb testing.TB, n, backends int, view views.View) []byte {
	st := directorStatus()
	st.View, st.Services = view, nil
	st.Totals = views.StatusTotals{Services: n, IPVSServices: n, InKernel: n, VIPs: n / 10, VIPsHeld: n / 10}
	for i := range n {
		s := views.ServiceStatus{Name: fmt.Sprintf("s%05d", i), Key: fmt.Sprintf("tcp:10.50.%d.%d:%d", i/2500, i/10%250+1, 1000+i%10),
			VIP: fmt.Sprintf("10.50.%d.%d", i/2500, i/10%250+1), Scheduler: "mh", Flags: "mh-fallback", InKernel: true, VIPHeld: true}
		for j := range backends {
			d := views.DestinationStatus{Address: fmt.Sprintf("10.3.0.%d:%d", j+1, 1000+i%10), Forwarding: "route",
				ConfiguredWeight: 1, Weight: 1, Eligible: true, ReportedWeight: -1, ActiveConns: j, Connections: uint64(100 * j)}
			if i%100 == 0 {
				d.Weight, d.Eligible, d.Health, d.HealthError = 0, false, "unhealthy", "tcp: connection refused"
			}
			s.Destinations = append(s.Destinations, d)
		}
		if i%100 == 0 {
			s.Problem = "no backend takes new connections"
			st.Totals.Problems++
		}
		if view == views.ViewFull || (s.Problem != "" && len(st.Services) < views.ProblemsListed) {
			st.Services = append(st.Services, s)
		}
	}
	raw, err := json.Marshal(st)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// BenchmarkPrintStatus times the CLI's side of `lvsd status`: decoding the
// agent's answer and printing the table (full: --all; summary: what
// `lvsd status` shows above views.SummaryAbove services) or the JSON.
func BenchmarkPrintStatus(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		for _, c := range []struct {
			view   views.View
			asJSON bool
		}{{views.ViewFull, false}, {views.ViewFull, true}, {views.ViewSummary, false}} {
			raw := scaleStatus(b, n, 10, c.view)
			name := fmt.Sprintf("services=%d/view=%s", n, c.view)
			if c.asJSON {
				name += "/json"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				b.ReportMetric(float64(len(raw)), "answer-bytes")
				for b.Loop() {
					if err := printStatus(io.Discard, raw, c.asJSON, columnsState, statusNow); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
