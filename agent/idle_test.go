package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIdleCPU: the CPU an idle director of 10,000 services × 10
// backends (one file each) spends, against the fakes, in its own loop
// with the default Check and Resync and the real clock: the share of one
// core over LVSD_IDLE_SECONDS (default 60) after its first pass, and the
// CPU a second. With LVSD_IDLE_CPU_PROFILE=FILE the idle window's CPU
// profile is written there, to find periodic work that grows with the
// number of services (go tool pprof -top). b.N is not used.
func BenchmarkIdleCPU(b *testing.B) {
	window := 60 * time.Second
	if s := os.Getenv("LVSD_IDLE_SECONDS"); s != "" {
		d, err := time.ParseDuration(s + "s")
		if err != nil {
			b.Fatalf("LVSD_IDLE_SECONDS=%q: %v", s, err)
		}
		window = d
	}
	e := newEnv(b)
	tenBackendServices(e, 10000)
	h, err := NewHolder(e.kernel(), nil, filepath.Join(e.dir, "state"), nil)
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Holder: h, Kernel: e.kernel(), ConfigPath: filepath.Join(e.dir, "lvsd.yaml"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now}
	a := New(opts)
	cfg, err := LoadConfig(opts.ConfigPath)
	if err != nil {
		b.Fatal(err)
	}
	a.opts.Config = cfg
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	// The first pass has run once the agent publishes a pass.
	for a.snap.Load() == nil || a.snap.Load().Passes.Passes == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(DefaultCheck) // the start's own settling
	if f := os.Getenv("LVSD_IDLE_CPU_PROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	var gcBefore, gcAfter runtime.MemStats
	runtime.ReadMemStats(&gcBefore)
	before, start := cpuTime(b), time.Now()
	time.Sleep(window)
	used, wall := cpuTime(b)-before, time.Since(start)
	runtime.ReadMemStats(&gcAfter)
	b.ReportMetric(100*used.Seconds()/wall.Seconds(), "%core")
	b.ReportMetric(float64(used.Microseconds())/wall.Seconds()/1000, "cpu-ms/s")
	// The collections, and the bytes allocated between them, say what a
	// collector pace costs here: each one marks the whole live heap.
	b.ReportMetric(float64(gcAfter.NumGC-gcBefore.NumGC)*60/wall.Seconds(), "gc/min")
	b.ReportMetric(float64(gcAfter.TotalAlloc-gcBefore.TotalAlloc)/wall.Seconds()/1024, "alloc-KiB/s")
	b.ReportMetric(float64(gcAfter.HeapAlloc)/(1<<20), "heap-MiB")
}

// cpuTime is the process's user and system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
