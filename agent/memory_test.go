package agent

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// gcPercent reads the collector's pace (SetGCPercent returns the old one).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// A full load runs at the loading pace and the loop settles to the steady
// one after the pass that followed it; a one-file reload changes nothing.
func TestGCPaceFollowsFullLoads(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(gcPercent())
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent() // started: a full load
	if got := gcPercent(); got != loadGCPercent || !a.loadGarbage {
		t.Fatalf("after the start: GC percent %d, garbage to release %v; want %d, true", got, a.loadGarbage, loadGCPercent)
	}
	a.reconcile(context.Background())
	debug.SetGCPercent(33) // to see the release set it
	a.settleMemory()
	steady := steadyPace(liveHeap())
	if got := gcPercent(); got != steady || a.loadGarbage {
		t.Fatalf("after the first pass: GC percent %d, garbage to release %v; want %d, false", got, a.loadGarbage, steady)
	}
	e.service("web", webTwo+"  - {address: 10.0.0.13}\n")
	a.reload("file change", []string{e.dir + "/services.d/web.yaml"})
	if got := gcPercent(); got != steady || a.loadGarbage {
		t.Errorf("one file reloaded: GC percent %d, garbage to release %v; want %d, false", got, a.loadGarbage, steady)
	}
	a.reload("signal", nil)
	if got := gcPercent(); got != loadGCPercent || !a.loadGarbage {
		t.Errorf("full reload: GC percent %d, garbage to release %v; want %d, true", got, a.loadGarbage, loadGCPercent)
	}

	t.Setenv("GOGC", "50") // the operator's
	debug.SetGCPercent(50)
	a.reconcile(context.Background())
	a.settleMemory()
	if got := gcPercent(); got != 50 {
		t.Errorf("with GOGC=50 set: GC percent %d after a load's release, want 50", got)
	}
}

// A large director's first pass runs at the steady pace, not the load's:
// it holds the plan beside the configuration, and at Go's default pace
// the heap could double.
func TestFirstPassRunsAtTheSteadyPace(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(gcPercent())
	heap := make([]byte, steadyPaceFrom+8<<20) // a large director's live heap
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	if got := gcPercent(); got != steadyGCPercent || !a.loadGarbage {
		t.Fatalf("after the start: GC percent %d, garbage to release %v; want %d, true", got, a.loadGarbage, steadyGCPercent)
	}
	runtime.KeepAlive(heap)
}

// The soft memory limit follows the heap the last collection marked live,
// is lifted while a full load's garbage waits to be released, and is left
// alone when the operator set GOMEMLIMIT.
func TestMemoryLimitFollowsTheLiveHeap(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	a := &Agent{}
	for _, c := range []struct {
		why     string
		loading bool
		live    uint64
		want    int64
	}{
		{"small heap: none", false, 10 << 20, math.MaxInt64},
		{"large heap", false, 80 << 20, 112 << 20},
		{"it grew", false, 100 << 20, 137 << 20},
		{"it shrank", false, 60 << 20, 87 << 20},
		{"a full load's garbage is waiting", true, 60 << 20, math.MaxInt64},
		{"released", false, 60 << 20, 87 << 20},
	} {
		a.loadGarbage = c.loading
		a.limitMemory(c.live)
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("%s: live %d MiB: limit %d, want %d", c.why, c.live>>20, got, c.want)
		}
	}
	t.Setenv("GOMEMLIMIT", "300MiB")
	debug.SetMemoryLimit(300 << 20)
	a.limitMemory(80 << 20)
	if got := debug.SetMemoryLimit(-1); got != 300<<20 {
		t.Errorf("with GOMEMLIMIT set: limit %d, want the operator's %d", got, 300<<20)
	}
}

func TestSteadyPace(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{{0, 100}, {5 << 20, 100}, {32<<20 - 1, 100}, {32 << 20, 25}, {80 << 20, 25}} {
		if got := steadyPace(c.live); got != c.want {
			t.Errorf("steadyPace(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}

// BenchmarkStateBytes: the agent's live heap per service (10 backends
// each) once reconciled, what a director keeps resident besides Go's
// runtime: at 1,000 and 10,000 services, one file each, against the fake
// kernel, whose own share is measured by dropping the agent and
// subtracted. b.N is not used: the figures are of one build.
func BenchmarkStateBytes(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			e := newEnv(b)
			for i := range n {
				var sb strings.Builder
				fmt.Fprintf(&sb, "service: s%05d\nvip: 10.0.%d.1\nports: [%d]\nbackends:\n", i, i/1000, 1000+i%1000)
				for j := range 10 {
					fmt.Fprintf(&sb, "  - {address: 10.1.%d.%d}\n", i/200, j+1+(i%20)*10)
				}
				e.service(fmt.Sprintf("s%05d", i), sb.String())
			}
			a := e.agent()
			a.reconcile(context.Background())
			a.settleMemory()
			withAgent := liveHeap()
			runtime.KeepAlive(a)
			a = nil
			kernelOnly := liveHeap()
			runtime.KeepAlive(e)
			perService := float64(withAgent-kernelOnly) / float64(n)
			b.ReportMetric(perService, "bytes/service")
			b.ReportMetric(perService/10, "bytes/destination")
			b.ReportMetric(float64(withAgent-kernelOnly)/(1<<20), "MiB")
		})
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A collection is started ahead only for a large heap past half its way
// from the live heap to the goal.
func TestCollectNow(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, goal, objects uint64
		want                bool
	}{
		{60 * mib, 75 * mib, 62 * mib, false}, // just collected
		{60 * mib, 75 * mib, 68 * mib, true},  // past half the headroom
		{60 * mib, 75 * mib, 80 * mib, true},  // past the goal: collecting already, or about to
		{8 * mib, 16 * mib, 15 * mib, false},  // a small director: Go's own pace
		{60 * mib, 60 * mib, 70 * mib, false}, // no goal above the live heap: nothing to gain
	} {
		if got := collectNow(c.live, c.goal, c.objects); got != c.want {
			t.Errorf("live %d MiB, goal %d MiB, objects %d MiB: %v, want %v", c.live/mib, c.goal/mib, c.objects/mib, got, c.want)
		}
	}
}
