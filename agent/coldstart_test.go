package agent

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"
)

// heapPeak samples the heap's objects (live and not yet swept) until
// stopped, and returns the most it saw.
func heapPeak() (stop func() uint64) {
	done := make(chan struct{})
	var peak uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}

// tenBackendServices writes n service files of 10 backends each, as the
// VM benchmark (make bench) does.
func tenBackendServices(e *testEnv, n int) {
	for i := range n {
		var sb strings.Builder
		fmt.Fprintf(&sb, "service: s%05d\nvip: 10.0.%d.1\nports: [%d]\nbackends:\n", i, i/1000, 1000+i%1000)
		for j := range 10 {
			fmt.Fprintf(&sb, "  - {address: 10.1.%d.%d}\n", i/200, j+1+(i%20)*10)
		}
		e.service(fmt.Sprintf("s%05d", i), sb.String())
	}
}

// BenchmarkColdStartMemory: the heap a cold start of n services × 10
// backends (one file each) reaches at its peak — loading every file,
// building the desired state and the first pass against the fake kernel —
// and what stays live once the agent has settled, then after a full
// reload (SIGHUP). The fake kernel's own share (its copy of what was
// programmed) is measured by dropping the agent and subtracted from each.
// b.N is not used: the figures are of one start. To see where the settled
// bytes are, add -memprofilerate 512 and LVSD_STEADY_HEAP_PROFILE=FILE:
// the heap of the 10,000-service agent is written there once settled
// (go tool pprof -sample_index=inuse_space).
func BenchmarkColdStartMemory(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			e := newEnv(b)
			tenBackendServices(e, n)
			base := liveHeap()
			stop := heapPeak()
			a := e.agent()
			loadPeak := stop()
			stop = heapPeak()
			a.reconcile(context.Background())
			peak := max(stop(), loadPeak)
			a.settleMemory()
			steady := liveHeap()
			if f := os.Getenv("LVSD_STEADY_HEAP_PROFILE"); f != "" && n == 10000 {
				out, err := os.Create(f)
				if err != nil {
					b.Fatal(err)
				}
				pprof.WriteHeapProfile(out)
				out.Close()
			}

			stop = heapPeak()
			a.reload("signal", nil)
			a.reconcile(context.Background())
			reloadPeak := stop()
			a.settleMemory()
			reloaded := liveHeap()
			runtime.KeepAlive(a)
			a = nil
			kernel := liveHeap() - base
			runtime.KeepAlive(e)
			mib := func(v uint64) float64 { return float64(int64(v)-int64(base)-int64(kernel)) / (1 << 20) }
			b.ReportMetric(mib(peak), "peak-MiB")
			b.ReportMetric(mib(loadPeak), "load-peak-MiB")
			b.ReportMetric(mib(steady), "steady-MiB")
			b.ReportMetric(mib(reloadPeak), "reload-peak-MiB")
			b.ReportMetric(mib(reloaded), "reloaded-MiB")
			b.ReportMetric(mib(steady)*(1<<20)/float64(n), "bytes/service")
			b.ReportMetric(float64(kernel)/(1<<20), "fake-kernel-MiB")
		})
	}
}
