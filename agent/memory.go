package agent

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"time"
)

// How the agent keeps its resident memory near its live state. Nearly all
// of an agent's heap is long-lived (the configuration, desired state and
// kernel view: 87 MiB at 10,000 services × 10 backends), and nearly all its
// garbage comes in bursts: loading every file allocated ~2 GB at that size.
//
//   - A full load runs at Go's default pace (GOGC 100): a tighter one would
//     multiply the collections of a cold start.
//   - The pass after it hands what the burst left back to the system
//     (releaseLoadGarbage): the runtime would otherwise keep the peak
//     mapped (RSS 308–340 MiB at 10,000 services, live heap 87 MiB).
//   - From then on, once the live heap is large (steadyPaceFrom), the
//     collector runs at steadyGCPercent: a heap goal of 125 % of the live
//     heap instead of 200 %, for a few more collections of the little an
//     idle director allocates. A small director keeps Go's default: its
//     memory is no concern, and at 25 % a heap of a few MiB would be
//     collected after every few hundred KiB of allocation.
//
// GOGC in the environment, if set, is the operator's and is left alone.
const (
	loadGCPercent   = 100
	steadyGCPercent = 25
	steadyPaceFrom  = 32 << 20
)

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
}

// releaseLoadGarbage hands the memory a full load and its first pass left
// behind back to the system and sets the steady pace for what is live. It costs one
// collection, so it runs only after the pass that followed a full load (a
// start, a full reload), from the loop: inside the pass, the pass's own ops
// and copies are still live.
func (a *Agent) releaseLoadGarbage() {
	if !a.loadGarbage {
		return
	}
	a.loadGarbage = false
	start := time.Now()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	paceGC(steadyPace(after.HeapAlloc))
	a.log.Log(context.Background(), slog.LevelDebug, "returned the load's memory to the system",
		"heap_live_bytes", after.HeapAlloc, "released_bytes", int64(after.HeapReleased)-int64(before.HeapReleased),
		"duration", time.Since(start).Round(time.Microsecond).String())
}
