package agent

import (
	"context"
	"runtime/debug"
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
	a.releaseLoadGarbage()
	if got := gcPercent(); got != steadyGCPercent || a.loadGarbage {
		t.Fatalf("after the first pass: GC percent %d, garbage to release %v; want %d, false", got, a.loadGarbage, steadyGCPercent)
	}
	e.service("web", webTwo+"  - {address: 10.0.0.13}\n")
	a.reload("file change", []string{e.dir + "/services.d/web.yaml"})
	if got := gcPercent(); got != steadyGCPercent || a.loadGarbage {
		t.Errorf("one file reloaded: GC percent %d, garbage to release %v; want %d, false", got, a.loadGarbage, steadyGCPercent)
	}
	a.reload("signal", nil)
	if got := gcPercent(); got != loadGCPercent || !a.loadGarbage {
		t.Errorf("full reload: GC percent %d, garbage to release %v; want %d, true", got, a.loadGarbage, loadGCPercent)
	}

	t.Setenv("GOGC", "50") // the operator's
	debug.SetGCPercent(50)
	a.reconcile(context.Background())
	a.releaseLoadGarbage()
	if got := gcPercent(); got != 50 {
		t.Errorf("with GOGC=50 set: GC percent %d after a load's release, want 50", got)
	}
}
