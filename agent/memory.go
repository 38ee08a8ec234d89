package agent

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"
)

// releaseLoadGarbage hands the memory a full load and its first pass
// left behind back to the system. Loading thousands of files and
// programming their services allocates several times the state the agent
// keeps; the runtime would keep that peak mapped for minutes (it returns
// memory slowly, and only above twice the live heap), which at 10,000
// services was most of the agent's resident memory (docs/performance.md).
// It costs one collection, so it runs only after a pass that followed a
// full load: a start, a full reload.
func releaseLoadGarbage(log *slog.Logger) {
	start := time.Now()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	log.Log(context.Background(), slog.LevelDebug, "returned the load's memory to the system",
		"heap_live_bytes", after.HeapAlloc, "released_bytes", int64(after.HeapReleased)-int64(before.HeapReleased),
		"duration", time.Since(start).Round(time.Microsecond).String())
}
