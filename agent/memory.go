package agent

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// How the agent keeps its resident memory near its live state. Nearly all
// of an agent's heap is long-lived (the configuration, desired state and
// kernel view: 32 MiB at 10,000 services × 10 backends, up to ~40 MiB
// with the counters of destinations with traffic), and nearly all its
// garbage comes in bursts: loading every file, and the first pass.
//
//   - A full load runs at Go's default pace (GOGC 100): a tighter one would
//     multiply the collections of a cold start. The first pass after a
//     start runs at the steady pace (passAfterLoad): it builds the view of
//     the kernel beside the configuration and the desired state.
//   - The pass after a full load hands what the burst left back to the system
//     (settleMemory): the runtime would otherwise keep the peak
//     mapped (RSS 308–340 MiB at 10,000 services, live heap 87 MiB). So
//     are the pages of the executable the load ran (codepages.go).
//   - From then on, once the live heap is large (steadyPaceFrom), the
//     collector runs at steadyGCPercent: a heap goal of 125 % of the live
//     heap instead of 200 %, for a few more collections of the little an
//     idle director allocates. A small director keeps Go's default: its
//     memory is no concern, and at 25 % a heap of a few MiB would be
//     collected after every few hundred KiB of allocation.
//   - And the runtime gets a soft memory limit (softLimit: the steady
//     heap goal, 1.25 × the live heap, + 12 MiB), followed after every
//     pass. The collector alone does not bound what stays resident:
//     memory freed after a pass's or a status request's copies is
//     returned to the system by a background scavenger paced at ~1 % of a
//     CPU, and at 10,000 services the director was found holding 35–40
//     MiB of such freed heap a minute after its start (RSS 125 MiB, live
//     heap 57). Over the limit the runtime returns it at once. At 1.5 × the
//     live heap + 16 MiB, as it was, a settled director of 10,000 services
//     (live heap 47 MiB) could keep 28 MiB of freed heap above the goal.
//     12 MiB above the goal leaves room for the runtime's own memory
//     (stacks, spans, collector metadata, ~8 MiB) and most of a one-file
//     change (~9 MiB), so it adds collections mainly while a larger burst
//     (lvsd status --all, ~80 MB at 10,000 services) runs, and it is
//     lifted for a full load. With 16 MiB a settled director of 10,000
//     services held 52–55 MiB of anonymous memory, with 12 MiB 50 MiB, one
//     change and a SIGHUP as fast (VM, make bench).
//
// GOGC and GOMEMLIMIT in the environment, if set, are the operator's and
// are left alone.
const (
	loadGCPercent   = 100
	steadyGCPercent = 25
	steadyPaceFrom  = 32 << 20
	softLimitSlack  = 12 << 20
	noMemoryLimit   = math.MaxInt64
)

// softLimit is the runtime's soft memory limit for a live heap of live
// bytes: the steady pace's heap goal, plus the runtime's own memory
// (stacks, spans, collector metadata) and a small change's copies. A
// small director has none.
func softLimit(live uint64) int64 {
	if live < steadyPaceFrom {
		return noMemoryLimit
	}
	return int64(live + live*steadyGCPercent/100 + softLimitSlack)
}

// limitMemory sets the soft memory limit for the live heap the last
// collection marked, unless the operator set GOMEMLIMIT.
func (a *Agent) limitMemory(live uint64) {
	limit := softLimit(live)
	if a.loadGarbage {
		limit = noMemoryLimit // a load's garbage is released after its pass
	}
	if limit == a.memoryLimit || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	a.memoryLimit = limit
	debug.SetMemoryLimit(limit)
}

// markedLive is the heap the last collection found live.
func markedLive() uint64 {
	v, _ := heapBytes("/gc/heap/live:bytes")
	return v[0]
}

// heapBytes reads the runtime's metrics of those names (ok false, and
// zeros, if one is unknown to this runtime).
func heapBytes(names ...string) ([]uint64, bool) {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	out := make([]uint64, len(names))
	for i, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			return make([]uint64, len(names)), false
		}
		out[i] = v.Value.Uint64()
	}
	return out, true
}

// steadyPace is the collector's pace for a live heap of live bytes.
func steadyPace(live uint64) int {
	if live >= steadyPaceFrom {
		return steadyGCPercent
	}
	return loadGCPercent
}

// paceGC sets the collector's pace unless the operator set GOGC.
func paceGC(percent int) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}

// loading says a full load is about to run: the collector goes to its
// loading pace, and the loop releases the garbage after the next pass.
func (a *Agent) loading() {
	paceGC(loadGCPercent)
	a.loadGarbage = true
	a.limitMemory(0)
}

// passAfterLoad says the configuration was built anew (a start, an agent
// file changed) and the next pass looks at every service: at a cold start
// of 10,000 services it builds the view of the kernel (12 MB) beside the
// configuration, a part's ops at a time (passPart), while the kernel
// writes allocate messages. A collection
// now frees the load's garbage and marks what is live, and the pass runs
// at the steady pace for it: at Go's default the heap could grow to twice
// what the pass holds before a collection, and a cold start's resident set
// peaked at 254-271 MiB with 113 MiB after it.
func (a *Agent) passAfterLoad() {
	runtime.GC()
	paceGC(steadyPace(markedLive()))
}

// settleMemory runs after every pass, from the loop: the soft memory
// limit follows the live heap. After the pass that followed a full load (a
// start, a full reload) it first hands the memory the load left behind back
// to the system and sets the steady pace for what is live: that costs one
// collection, so it is not done after other passes, and not inside the
// pass, where the pass's own ops and copies are still live.
func (a *Agent) settleMemory() {
	if !a.loadGarbage {
		a.limitMemory(markedLive())
		CollectAhead()
		return
	}
	a.loadGarbage = false
	start := time.Now()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	paceGC(steadyPace(after.HeapAlloc))
	a.limitMemory(after.HeapAlloc)
	codeKiB, err := releaseCodePages()
	if err != nil {
		a.log.Warn("cannot hand the executable's pages back after the load; they stay mapped", "err", err)
	}
	a.log.Log(context.Background(), slog.LevelDebug, "returned the load's memory to the system",
		"heap_live_bytes", after.HeapAlloc, "released_bytes", int64(after.HeapReleased)-int64(before.HeapReleased),
		"code_pages_unmapped_bytes", codeKiB<<10, "duration", time.Since(start).Round(time.Microsecond).String())
}

// collecting is set while CollectAhead's collection runs.
var collecting atomic.Bool

// CollectAhead starts a collection in the background, while the loop waits
// for its next event, when the heap is past half its way from the live
// heap to the collector's goal (collectNow). A one-file change among
// 10,000 services allocates ~9 MiB against a headroom of ~15 MiB at the
// steady pace, so every other change met a collection half way and, as the
// goroutine allocating, did much of the marking of the whole heap itself:
// its reload took 0.08–0.75 s under emulation instead of ~0.08 s. The
// collection costs the same CPU here, off the path of the next change.
// The loop calls it after each pass, the local API (agent/views) after
// each answer, whose copies are garbage then.
func CollectAhead() {
	v, ok := heapBytes("/gc/heap/live:bytes", "/gc/heap/goal:bytes", "/memory/classes/heap/objects:bytes")
	if !ok || !collectNow(v[0], v[1], v[2]) || !collecting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer collecting.Store(false)
		runtime.GC()
	}()
}

// collectNow reports whether a heap of objects bytes (live and not yet
// swept) should be collected ahead, with live bytes marked live and a
// collector goal of goal: a large heap (the steady pace's), past half
// its headroom.
func collectNow(live, goal, objects uint64) bool {
	return live >= steadyPaceFrom && goal > live && objects >= live+(goal-live)/2
}
