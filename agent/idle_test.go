package agent

import (
	"os"
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
	window := idleWindow(b, 60*time.Second)
	e := newEnv(b)
	_, stop := runningDirector(b, e)
	defer stop()
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
