//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// statusServices is how many services TestStatusAtScale configures:
// E2E_STATUS_SERVICES, by default 300 (above the 100 that switch the
// default view to the summary; make test keeps the CI run under 30 min).
// Issue 16's figure is 10,000, which
// takes the VM a few minutes to program; run it on its own:
//
//	go test -tags 'e2e vmtest' -c -o /tmp/e2e.test ./e2e
//	E2E_STATUS_SERVICES=10000 LVSD_BIN=$PWD/bin/lvsd e2e/vm/run --timeout 3600 --rw $PWD/e2e/out -- \
//	  /tmp/e2e.test -test.run TestStatusAtScale -test.v -test.timeout 60m
func statusServices(t *testing.T) int { return envCount(t, "E2E_STATUS_SERVICES", 300, 2) }

// statusBackends is how many real servers each service of TestStatusAtScale
// has (issue 16: 10).
const statusBackends = 10

// scaleServiceFiles returns service files (name → YAML) for services
// first..last-1 of TestStatusAtScale: ten services to a VIP, statusBackends
// backends each, 500 services to a file (lvsd reads files up to 1 MiB).
func scaleServiceFiles(first, last int) map[string]string {
	files := map[string]string{}
	var b strings.Builder
	flush := func(i int) {
		if b.Len() > 0 {
			files[fmt.Sprintf("bulk%05d", i)] = b.String()
			b.Reset()
		}
	}
	for i := first; i < last; i++ {
		if i%500 == 0 {
			flush(i)
		}
		fmt.Fprintf(&b, "---\nservice: s%05d\nvip: 10.50.%d.%d\nports: [%d]\nbackends:\n", i, i/2500, i/10%250+1, 1000+i%10)
		for j := range statusBackends {
			fmt.Fprintf(&b, "  - {address: 10.3.%d.%d}\n", j/250, j%250+1)
		}
	}
	flush(last)
	return files
}

// timeStatus runs `lvsd status args…` reps times on host and logs how long
// each took and how much it printed; it fails the test if one fails or
// prints nothing containing want.
func timeStatus(t *testing.T, host *topo.Host, label, want string, reps int, args ...string) []time.Duration {
	t.Helper()
	socket := "--socket=/run/lvsd-e2e/" + host.Name + ".sock"
	var took []time.Duration
	for range reps {
		start := time.Now()
		out, code := runLVSD(t, host, append([]string{"status", socket}, args...)...)
		took = append(took, time.Since(start))
		if code != 0 {
			t.Fatalf("lvsd status %v: exit %d: %.2000s", args, code, out)
		}
		if !strings.Contains(out, want) {
			t.Fatalf("lvsd status %v lacks %q: %.3000s", args, want, out)
		}
		t.Logf("%-40s %7.3f s  %9d bytes", label, took[len(took)-1].Seconds(), len(out))
	}
	return took
}

// TestStatusAtScale times `lvsd status` on one director with statusServices
// services × 10 backends (issue 16: "lvsd status at 10k services: ≤ 1 s in
// the VM"), against `lvsd version` and the status of one service in the
// same run: under emulation absolute times are noise, the ratios are not.
// It asserts what is printed, never how fast: the figures go to the log and
// to e2e/out/status-scale.txt.
func TestStatusAtScale(t *testing.T) {
	n := statusServices(t)
	tp := topo.New(t, topo.WithRealServers(0), topo.WithClientSources(0))
	host := tp.Director(1)
	d := newDirector(t, host, scaleServiceFiles(0, 1))
	d.logAtInfo()
	d.start()
	d.waitServices(1, statusBackends)

	const reps = 3
	var report strings.Builder
	record := func(label string, took []time.Duration) {
		fmt.Fprintf(&report, "%-44s min %6.3f s  median %6.3f s  max %6.3f s\n", label, slices.Min(took).Seconds(),
			median(took).Seconds(), slices.Max(took).Seconds())
	}
	version := make([]time.Duration, 0, reps)
	for range reps {
		start := time.Now()
		if out, code := runLVSD(t, host, "version"); code != 0 {
			t.Fatalf("lvsd version: exit %d: %s", code, out)
		}
		version = append(version, time.Since(start))
	}
	record("lvsd version (process start)", version)
	record("lvsd status, 1 service", timeStatus(t, host, "status, 1 service", "-> 10.3.0.10:1000", reps))

	started, mark := time.Now(), d.logSize()
	for name, body := range scaleServiceFiles(1, n) {
		writeFile(t, filepath.Join(d.dir, "services.d", name+".yaml"), body)
	}
	line := d.waitLog(mark, 30*time.Minute, "msg=reconciled", fmt.Sprintf("add-service=%d", n-1))
	t.Logf("%d services × %d backends programmed in %v: %s", n, statusBackends, time.Since(started).Round(time.Second), line)

	one := fmt.Sprintf("s%05d", n/2)
	summary := fmt.Sprintf("services: %d (%d IPVS services, %d in the kernel)", n, n, n)
	for _, c := range []struct {
		label, want string
		args        []string
	}{
		{"status", summary, nil},
		{"status --problems", "no problems", []string{"--problems"}},
		{"status --service " + one, "-> 10.3.0.10:", []string{"--service", one}},
		// 200 services: the summary, from the passes' read-back.
		{"status --service 's00[01]*'", "services: 200 (200 IPVS services", []string{"--service", "s00[01]*"}},
		// 60 services: read from the kernel now (up to views.FreshLimit), in full.
		{"status --service 's000[0-5]*'", "-> 10.3.0.10:1009", []string{"--service", "s000[0-5]*"}},
		{"status --all", "s00000", []string{"--all"}},
		{"status --json", `"name": "s00000"`, []string{"--json"}},
	} {
		record(fmt.Sprintf("lvsd %s, %d services", c.label, n), timeStatus(t, host, c.label, c.want, reps, c.args...))
	}
	t.Logf("lvsd status timings (%d services × %d backends, %d runs each):\n%s", n, statusBackends, reps, report.String())
	if outDir != "" {
		_ = os.WriteFile(filepath.Join(outDir, "status-scale.txt"), []byte(report.String()), 0o644)
	}
}
