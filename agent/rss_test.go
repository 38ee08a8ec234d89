package agent

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runningDirector starts an agent of 10,000 services × 10 backends (one
// file each) on the fakes in its own loop, with the default Check and
// Resync and the real clock, and returns once its first pass has run and
// the start has settled. stop ends the loop.
func runningDirector(b *testing.B, e *testEnv) (a *Agent, stop func()) {
	tenBackendServices(e, 10000)
	h, err := NewHolder(e.kernel(), nil, filepath.Join(e.dir, "state"), nil)
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Holder: h, Kernel: e.kernel(), ConfigPath: filepath.Join(e.dir, "lvsd.yaml"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now}
	a = New(opts)
	cfg, err := LoadConfig(opts.ConfigPath)
	if err != nil {
		b.Fatal(err)
	}
	a.opts.Config = cfg
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, nil) }()
	// The first pass has run once the agent publishes a pass.
	for a.snap.Load() == nil || a.snap.Load().Passes.Passes == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(DefaultCheck) // the start's own settling
	return a, func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}

// idleWindow is LVSD_IDLE_SECONDS, or def.
func idleWindow(b *testing.B, def time.Duration) time.Duration {
	s := os.Getenv("LVSD_IDLE_SECONDS")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s + "s")
	if err != nil {
		b.Fatalf("LVSD_IDLE_SECONDS=%q: %v", s, err)
	}
	return d
}

// BenchmarkSettledRSS: where the resident memory of an idle director of
// 10,000 services × 10 backends goes, against the fakes, after its start
// and an idle window of LVSD_IDLE_SECONDS (default 45, as make bench
// waits): the resident set from /proc/self/smaps_rollup, anonymous and
// file-backed (this test binary's pages, not lvsd's), and the runtime's
// classes of memory (runtime/metrics). The fakes' live heap (their copy
// of what was programmed, which a director does not hold) is measured by
// dropping the agent and reported apart: it is inside heap-live-MiB and
// adds its share of the collector's headroom. Run it with
// GODEBUG=disablethp=1, as the packaged unit runs lvsd. b.N is not used.
func BenchmarkSettledRSS(b *testing.B) {
	e := newEnv(b)
	a, stop := runningDirector(b, e)
	time.Sleep(idleWindow(b, 45*time.Second))
	rollup := smapsRollup(b)
	m := memoryClasses()
	stop()
	withAgent := liveHeap()
	runtime.KeepAlive(a)
	a = nil
	fakes := liveHeap()
	runtime.KeepAlive(e)
	mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
	b.ReportMetric(mib(rollup["Rss"]), "rss-MiB")
	b.ReportMetric(mib(rollup["Anonymous"]), "anon-MiB")
	b.ReportMetric(mib(rollup["Rss"]-rollup["Anonymous"]), "file-MiB")
	b.ReportMetric(mib(m["/gc/heap/live:bytes"]), "heap-live-MiB")
	b.ReportMetric(mib(m["/memory/classes/heap/objects:bytes"]-m["/gc/heap/live:bytes"]), "heap-garbage-MiB")
	b.ReportMetric(mib(m["/memory/classes/heap/unused:bytes"]), "heap-unused-MiB")
	b.ReportMetric(mib(m["/memory/classes/heap/free:bytes"]), "heap-free-MiB")
	b.ReportMetric(mib(m["/memory/classes/heap/released:bytes"]), "heap-released-MiB")
	b.ReportMetric(mib(m["/memory/classes/heap/stacks:bytes"]+m["/memory/classes/os-stacks:bytes"]), "stacks-MiB")
	b.ReportMetric(mib(m["/memory/classes/metadata/mspan/inuse:bytes"]+m["/memory/classes/metadata/mspan/free:bytes"]+
		m["/memory/classes/metadata/mcache/inuse:bytes"]+m["/memory/classes/metadata/mcache/free:bytes"]+
		m["/memory/classes/metadata/other:bytes"]), "gc-metadata-MiB")
	b.ReportMetric(mib(m["/memory/classes/other:bytes"]+m["/memory/classes/profiling/buckets:bytes"]), "runtime-other-MiB")
	b.ReportMetric(mib(m["/memory/classes/total:bytes"]-m["/memory/classes/heap/released:bytes"]), "mapped-MiB")
	b.ReportMetric(mib(m["/gc/heap/goal:bytes"]), "heap-goal-MiB")
	b.ReportMetric(mib(withAgent-fakes), "agent-live-MiB")
	b.ReportMetric(mib(fakes), "fakes-live-MiB")
}

// memoryClasses reads every runtime metric of kind uint64.
func memoryClasses() map[string]uint64 {
	descs := metrics.All()
	s := make([]metrics.Sample, len(descs))
	for i, d := range descs {
		s[i].Name = d.Name
	}
	metrics.Read(s)
	out := make(map[string]uint64, len(s))
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			out[v.Name] = v.Value.Uint64()
		}
	}
	return out
}

// smapsRollup is /proc/self/smaps_rollup's sizes in bytes.
func smapsRollup(b *testing.B) map[string]uint64 {
	f, err := os.Open("/proc/self/smaps_rollup")
	if err != nil {
		b.Skipf("no smaps_rollup: %v", err)
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		kb, found := strings.CutSuffix(strings.TrimSpace(rest), " kB")
		if !ok || !found {
			continue
		}
		if v, err := strconv.ParseUint(kb, 10, 64); err == nil {
			out[name] = v << 10
		}
	}
	return out
}
