package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/lvsd/lvsd/agent/views"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: got:\n%s\nwant:\n%s", name, got, want)
	}
}

// counterStatus is directorStatus with traffic: the service rows add up
// the destinations in the kernel; one not in the kernel has no numbers.
func counterStatus() views.Status {
	st := directorStatus()
	web := &st.Services[0]
	d := web.Destinations
	d[0].Connections, d[0].PacketsIn, d[0].BytesIn = 1200, 34000, 2200000
	d[0].Rates = views.Rates{Connections: 40, PacketsIn: 1100, BytesIn: 72000}
	d[4].Connections, d[4].PacketsIn, d[4].PacketsOut, d[4].BytesIn, d[4].BytesOut = 7, 90, 80, 6000, 120000
	d[4].Rates = views.Rates{PacketsIn: 1, BytesIn: 60}
	web.Backends = views.BackendCounts{Connections: 1207, PacketsIn: 34090, PacketsOut: 80, BytesIn: 2206000, BytesOut: 120000,
		Rates: views.Rates{Connections: 40, PacketsIn: 1101, BytesIn: 72060}}
	return st
}

func TestWriteDirectorStatusCounters(t *testing.T) {
	for _, c := range []struct {
		golden string
		cols   statusColumns
		view   views.View
	}{
		{"status-stats.golden", columnsStats, views.ViewFull},
		{"status-rate.golden", columnsRate, views.ViewFull},
		{"status-stats-summary.golden", columnsStats, views.ViewSummary},
	} {
		t.Run(c.golden, func(t *testing.T) {
			st := counterStatus()
			st.View = c.view
			if c.view == views.ViewSummary {
				st.Totals = views.StatusTotals{Services: 2, IPVSServices: 2, InKernel: 1, VIPs: 2, VIPsHeld: 1, Problems: 2,
					Backends: st.Services[0].Backends}
				st.Totals.Backends.Total, st.Totals.Backends.Eligible, st.Totals.Backends.NotInKernel = 6, 1, 2
			}
			var b bytes.Buffer
			if err := writeDirectorStatus(&b, st, c.cols, statusNow); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, c.golden, b.Bytes())
		})
	}
}
