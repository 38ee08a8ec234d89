//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// scaleServices is how many services every director holds in
// TestFailoverGapAtScale besides the one the client probes:
// E2E_SCALE_SERVICES, by default 1,000 (2,000 gave the same ratio, 1.04, in 110 s). Issue 16's figure is 10,000, which
// three directors in one emulated VM take longer to program than the e2e
// package's VM may run (15 min); run it on its own for that:
//
//	make build && go test -tags 'e2e vmtest' -c -o /tmp/e2e.test ./e2e
//	E2E_SCALE_SERVICES=10000 LVSD_BIN=$PWD/bin/lvsd LVSD_ECHO_BIN=$PWD/bin/lvsd-echo LVSD_E2E_OUT=$PWD/e2e/out \
//	  e2e/vm/run --timeout 3600 --rw $PWD/e2e/out -- /tmp/e2e.test -test.run 'TestFailoverGapAtScale$' -test.v -test.timeout 3500s
func scaleServices(t *testing.T) int { return envCount(t, "E2E_SCALE_SERVICES", 1000, 1) }

// logAtInfo sets the log level of l's agent file to info: at scale, tens of
// thousands of debug lines would slow lvsd down under TCG, which is not
// what the scale tests measure.
func (l *lvsd) logAtInfo() {
	l.t.Helper()
	agentFile := filepath.Join(l.dir, "lvsd.yaml")
	b, err := os.ReadFile(agentFile)
	if err != nil {
		l.t.Fatal(err)
	}
	writeFile(l.t, agentFile, strings.Replace(string(b), "log: {level: debug}", "log: {level: info}", 1))
}

// envCount is the number in the environment variable name, at least least,
// or def when it is not set.
func envCount(t *testing.T, name string, def, least int) int {
	n := def
	if s := os.Getenv(name); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil || n < least {
			t.Fatalf("%s=%q: want a number of at least %d", name, s, least)
		}
	}
	return n
}

// scaleGapReps is how many cuts each size gets. A gap is the failure
// detection's phase plus the takeover, measured in 50 ms probes: its medians
// of three moved by ±40 ms between runs (ratios 0.76–1.18 in eight runs of
// the same code, one CI run over the bound); of five they move less.
const scaleGapReps = 5

// TestFailoverGapAtScale: TestFailoverGap's cuts, first with one service on
// the VIP, then, in the same run and topology, with scaleServices more
// services configured on every director (issue 16). A takeover moves addresses only
// and must not wait behind a pass or read back what it does not change, so
// the median gap may grow by at most a fifth (plus one probe interval: the
// gap is measured in 50 ms steps). `lvsd status` at that size is timed too.
func TestFailoverGapAtScale(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	key := clusterKey(t)
	var ds []*lvsd
	for i, d := range tp.Directors() {
		l := newClusterDirector(t, tp, d, key, fmt.Sprintf("  priority: %d\n", 250-50*i), vip)
		l.logAtInfo()
		l.start()
		ds = append(ds, l)
	}
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	p := startProber(t, tp.Client(), netip.AddrPortFrom(vip, 80), 50*time.Millisecond)
	p.waitSuccessAfter(t, time.Now(), 10*time.Second)
	one := measureGapsN(t, tp, p, vip, "1 service", scaleGapReps)

	n := scaleServices(t)
	// Files of 1,000 services: 10,000 in one file would pass lvsd's 1 MiB
	// limit on a configuration file.
	files := map[string]string{}
	for first := 0; first < n; first += 1000 {
		var b strings.Builder
		for i := first; i < min(first+1000, n); i++ {
			fmt.Fprintf(&b, "---\nservice: bulk%d\nvip: %s\nports: [%d]\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
				i, vip, 1000+i, tp.RS(1).V4, tp.RS(2).V4)
		}
		files[fmt.Sprintf("bulk%03d.yaml", first/1000)] = b.String()
	}
	started := time.Now()
	marks := make([]int, len(ds))
	for i, l := range ds {
		marks[i] = l.logSize()
		for name, body := range files {
			writeFile(t, filepath.Join(l.dir, "services.d", name), body)
		}
	}
	for i, l := range ds {
		passes := l.waitAdded(marks[i], n, 20*time.Minute)
		t.Logf("%s: %d services added in %d pass(es)", l.host.ID, n, passes)
	}
	t.Logf("%d services programmed on %d directors at once after %v", n, len(ds), time.Since(started).Round(time.Second))

	socket := "--socket=/run/lvsd-e2e/" + tp.Director(1).Name + ".sock"
	for range 3 {
		start := time.Now()
		out, code := runLVSD(t, tp.Director(1), "status", socket)
		took := time.Since(start)
		if code != 0 {
			t.Fatalf("lvsd status: exit %d: %.2000s", code, out)
		}
		t.Logf("lvsd status with %d services: %v, %d bytes", n+1, took.Round(time.Millisecond), len(out))
	}

	many := measureGapsN(t, tp, p, vip, fmt.Sprintf("%d services", n+1), scaleGapReps)
	var summary string
	for _, r := range []struct {
		name string
		gaps []time.Duration
	}{{"1 service", one}, {fmt.Sprintf("%d services", n+1), many}} {
		summary += fmt.Sprintf("%-16s %6.3f / %6.3f / %6.3f s\n", r.name, slices.Min(r.gaps).Seconds(), median(r.gaps).Seconds(),
			slices.Max(r.gaps).Seconds())
	}
	summary += fmt.Sprintf("ratio of the medians %.2f\n", float64(median(many))/float64(median(one)))
	t.Log("failover gaps (min / median / max of " + fmt.Sprint(scaleGapReps) + "):\n" + summary)
	if outDir != "" {
		_ = os.WriteFile(filepath.Join(outDir, "failover-gap-scale.txt"), []byte(summary), 0o644)
	}
	if m1, mN := median(one), median(many); mN > m1*6/5+50*time.Millisecond {
		t.Errorf("median gap with %d services %v, with one %v: more than 1.2 × (+50 ms)", n+1, mN, m1)
	}
}

// waitAdded waits until the passes lvsd logged after the mark off added n
// IPVS services between them (files written one after the other may be
// reloaded in one pass or several) and returns how many passes that took.
func (l *lvsd) waitAdded(off, n int, timeout time.Duration) int {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		added, passes := 0, 0
		text := l.logSince(off)
		if i := strings.LastIndexByte(text, '\n'); i >= 0 {
			for _, line := range strings.Split(text[:i], "\n") {
				var k int
				if j := strings.Index(line, "add-service="); j >= 0 && strings.Contains(line, "msg=reconciled") {
					fmt.Sscan(line[j+len("add-service="):], &k)
					added, passes = added+k, passes+1
				}
			}
		}
		if added >= n {
			return passes
		}
		l.checkAlive()
		if time.Now().After(deadline) {
			l.t.Fatalf("after %v lvsd's passes added %d of %d services; it logged since the mark:\n%.5000s", timeout, added, n, text)
		}
		time.Sleep(time.Second)
	}
}
