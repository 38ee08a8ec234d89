//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// TestStallExcused, on the lines of a CI run: director2 declared director
// failed after 274 ms of silence, during which director logged two stalls
// (126 ms, 114 ms) — 208 ms of the window, more than 274 − 2 × 50 ms.
// With only the first stall the declaration stays a false failover.
func TestStallExcused(t *testing.T) {
	owner := `time=2026-12-01T20:22:58.843Z level=DEBUG msg="this process was not scheduled; failure detection postponed" stall=96.41128ms
time=2026-12-01T20:23:11.074Z level=DEBUG msg="this process was not scheduled; failure detection postponed" stall=126.52479ms
time=2026-12-01T20:23:11.231Z level=DEBUG msg="this process was not scheduled; failure detection postponed" stall=113.97317ms`
	standby := `time=2026-12-01T20:23:11.199Z level=WARN msg="director failed: no heartbeat" peer=director silence=274ms failure_timeout=250ms live=2`
	fs := failureDeclarations(standby)
	if len(fs) != 1 || fs[0].peer != "director" || fs[0].silence != 274*time.Millisecond {
		t.Fatalf("declarations %+v", fs)
	}
	stalls := stallsIn(owner)
	if len(stalls) != 3 {
		t.Fatalf("stalls %+v", stalls)
	}
	if !stallExcused(fs[0], stalls, 50*time.Millisecond) {
		t.Error("a failure declared while the owner logged 208 ms of stalls in a 274 ms silence is not excused")
	}
	if stallExcused(fs[0], stalls[:2], 50*time.Millisecond) {
		t.Error("126 ms of stalls in a 274 ms silence excuse the declaration")
	}
}
